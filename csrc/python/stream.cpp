// Bindings: Stream, Event, current/default streams.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpsrt/device.h"
#include "mpsrt/event.h"
#include "mpsrt/stream.h"
#include "python/args.h"
#include "python/bindings.h"

namespace mpsrt::python {

namespace {

// A Python callable held by a runtime thread: called and released with the GIL taken, and
// never touched once the interpreter is finalizing.
struct PyCallback {
  std::shared_ptr<nb::object> fn;
  static bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
  }
  explicit PyCallback(nb::callable f)
      : fn(new nb::object(std::move(f)), [](nb::object* o) {
          if (python_alive()) {
            nb::gil_scoped_acquire gil;
            delete o;
          }  // else: leaked on purpose, the interpreter is gone
        }) {}
  void operator()() const {
    if (!python_alive()) return;
    nb::gil_scoped_acquire gil;
    try {
      (*fn)();
    } catch (nb::python_error& e) {
      // Reported at the stream's next synchronize() as a RuntimeError with this text.
      throw std::runtime_error(e.what());
    }
  }
};

// Per thread, the (previous current stream, previous device) of each `with stream:` block.
std::vector<std::pair<Stream, int>>& entered_streams() {
  thread_local std::vector<std::pair<Stream, int>> stack;
  return stack;
}

std::string stream_repr(const Stream& s) {
  return "mpsrt.Stream(device=" + std::to_string(s.device()) +
         ", stream_id=" + std::to_string(s.id()) + ", priority=" + std::to_string(s.priority()) +
         ")";
}

}  // namespace

Stream stream_of(nb::handle obj, const char* caller) {
  return cast_or_type_error<Stream>(obj, std::string(caller) + ": expected an mpsrt.Stream");
}

namespace {

// Making a stream, and `with stream:` (the stream and its device current for the block).
void bind_stream_context(nb::class_<Stream>& cls) {
  cls.def(
         "__init__",
         [](Stream* self, DeviceArg device, nb::int_ priority) {
           // Any int: like torch.cuda, priorities outside the classes clamp to the nearest one.
           const nb::int_ zero(0);
           const int below = PyObject_RichCompareBool(priority.ptr(), zero.ptr(), Py_LT);
           const int above = PyObject_RichCompareBool(priority.ptr(), zero.ptr(), Py_GT);
           if (below < 0 || above < 0) throw nb::python_error();
           const int p = below ? -1 : (above ? 1 : 0);
           new (self) Stream(stream_from_pool(p, device.get("Stream")));
         },
         nb::arg("device") = nb::none(), nb::arg("priority") = 0,
         "A stream from the device's pool: priority < 0 high, 0 normal, > 0 low.")
      .def_static(
          "priority_range", [] { return nb::typed<nb::tuple, int, int>(nb::make_tuple(1, -1)); },
          "The (least, greatest) stream priority, as torch.cuda.Stream.priority_range().\n"
          "\n"
          "Lower numbers run first; priorities outside the range clamp to it.\n"
          "\n"
          "Returns:\n"
          "    tuple[int, int]: (1, -1).")
      .def("__enter__",
           [](nb::handle self) {
             // As torch.cuda.Stream: the stream and its device become current for the block.
             const Stream s = stream_of(self, "Stream.__enter__()");
             const int prev_device = set_device(s.device());
             entered_streams().push_back({set_current_stream(s), prev_device});
             return nb::typed<nb::object, Stream>(nb::borrow(self));
           })
      .def(
          "__exit__",
          [](nb::handle self, nb::args) {
            (void)stream_of(self, "Stream.__exit__()");
            auto& stack = entered_streams();
            if (stack.empty()) {
              throw std::runtime_error("[stream] __exit__ without a matching __enter__");
            }
            const auto [prev_stream, prev_device] = stack.back();
            stack.pop_back();
            set_current_stream(prev_stream);
            set_device(prev_device);
          },
          nb::sig("def __exit__(self, *args: object) -> None"));
}

// The stream's work: waiting for it, ordering it after events and other streams, callbacks.
void bind_stream_work(nb::class_<Stream>& cls) {
  using nb::gil_scoped_release;
  cls.def("query", &Stream::query,
          "Whether the stream's work so far is done.\n"
          "\n"
          "Returns:\n"
          "    bool: True when all work submitted so far has completed.")
      .def("synchronize", &Stream::synchronize, nb::call_guard<gil_scoped_release>(),
           "Waits on the host for the stream's work so far.\n"
           "\n"
           "Raises:\n"
           "    RuntimeError: A command of the stream failed, or a host callback\n"
           "        (add_callback()) raised; the message carries its error.")
      .def(
          "wait_event",
          [](Stream& s, EventArg e) {
            Event& ev = e.get("wait_event()");
            nb::gil_scoped_release release;  // may commit the recording stream
            s.wait_event(ev);
          },
          nb::arg("event"),
          "Makes later work on this stream wait (on the device) for the event's last record.\n"
          "\n"
          "Args:\n"
          "    event: An mpsrt.Event; one never recorded is complete (no wait).\n"
          "\n"
          "Raises:\n"
          "    TypeError: event is not an mpsrt.Event.")
      .def(
          "wait_stream",
          [](Stream& s, StreamArg other) {
            const Stream o = other.get("wait_stream()");
            nb::gil_scoped_release release;  // commits `other`
            s.wait_stream(o);
          },
          nb::arg("stream").none(), nb::sig("def wait_stream(self, stream: Stream) -> None"),
          "Makes later work on this stream wait (on the device) for another stream's work so\n"
          "far; the host does not block.\n"
          "\n"
          "Args:\n"
          "    stream: The mpsrt.Stream to wait for.\n"
          "\n"
          "Raises:\n"
          "    TypeError: stream is not an mpsrt.Stream.")
      .def(
          "record_event",
          [](Stream& s, OptEventArg e) -> nb::typed<nb::object, Event> {
            if (e.is_none()) {
              Event ev;
              ev.record(s);
              return nb::typed<nb::object, Event>(nb::cast(std::move(ev)));
            }
            e.get("record_event()").record(s);
            return nb::typed<nb::object, Event>(nb::borrow(e.obj));
          },
          nb::arg("event") = nb::none(),
          "Records an event after the stream's work so far.\n"
          "\n"
          "Args:\n"
          "    event: The mpsrt.Event to record, or None for a new one (without timing).\n"
          "\n"
          "Returns:\n"
          "    mpsrt.Event: The recorded event.\n"
          "\n"
          "Raises:\n"
          "    TypeError: event is neither an mpsrt.Event nor None.")
      .def(
          "add_callback",
          [](Stream& s, nb::typed<nb::callable, void()> fn) {
            PyCallback cb(std::move(fn));
            // Committing may wait on back-pressure for earlier callbacks, which need the GIL.
            nb::gil_scoped_release release;
            s.add_callback(std::move(cb));
          },
          nb::arg("fn"),
          "Runs fn() on a runtime thread once the stream's work so far is done.\n"
          "\n"
          "fn must not wait for the device (synchronize(), Buffer.numpy()): it runs as part\n"
          "of the device's work.\n"
          "\n"
          "Args:\n"
          "    fn: A callable taking no argument; an exception it raises is raised by the\n"
          "        stream's next synchronize() (as a RuntimeError).\n"
          "\n"
          "Raises:\n"
          "    TypeError: fn is not callable.");
}

void bind_stream(nb::module_& m) {
  nb::class_<Stream> cls(
      m, "Stream",
      "An in-order queue of work on a device, as torch.cuda.Stream.\n"
      "\n"
      "Work (fills, copies, random fills) goes to the calling thread's current stream;\n"
      "`with stream:` makes the stream and its device current for the block. Streams are\n"
      "equal when they are the same queue.\n"
      "\n"
      "Args:\n"
      "    device: The device (an index, a device string such as 'mps:0', or None for the\n"
      "        current device).\n"
      "    priority: < 0 high, 0 normal, > 0 low; any int, clamped to priority_range().\n"
      "\n"
      "Raises:\n"
      "    TypeError: device or priority has a wrong type.\n"
      "    ValueError: device names no device of the active backend.\n"
      "\n"
      "Example:\n"
      "    >>> import mpsrt\n"
      "    >>> s = mpsrt.Stream(priority=-1)\n"
      "    >>> s.priority, s.device == mpsrt.current_device()\n"
      "    (-1, True)\n"
      "    >>> with s:  # s and its device are current in the block\n"
      "    ...     buf = mpsrt.empty(4, dtype='float32').fill_(1.5)\n"
      "    >>> mpsrt.current_stream() == s\n"
      "    False\n"
      "    >>> mpsrt.default_stream().wait_stream(s)  # later work there comes after s's\n"
      "    >>> s.synchronize()\n"
      "    >>> s.query()\n"
      "    True\n"
      "    >>> buf.numpy()\n"
      "    array([1.5, 1.5, 1.5, 1.5], dtype=float32)\n");
  bind_stream_context(cls);
  // Identity: the device, id and priority; == and hash() by the stream, not the object.
  cls.def_prop_ro("device", &Stream::device, "int: The index of the stream's device.")
      .def_prop_ro("device_index", &Stream::device,
                   "int: The index of the stream's device (torch.Stream's name for it).")
      .def_prop_ro("stream_id", &Stream::id,
                   "int: The stream's id, unique on its device (0 for the default stream).")
      .def_prop_ro("priority", &Stream::priority,
                   "int: The stream's priority (-1 high, 0 normal, 1 low).");
  bind_stream_work(cls);
  cls.def("__eq__",
          [](const Stream& a, nb::handle b) {
            return nb::isinstance<Stream>(b) && nb::cast<Stream>(b) == a;
          })
      .def("__hash__", [](const Stream& s) { return std::hash<uintptr_t>()(s.handle()); })
      .def("__repr__", &stream_repr);
}

void bind_event(nb::class_<Event>& event) {
  using nb::gil_scoped_release;
  event
      .def(
          "__init__",
          [](Event* self, bool enable_timing, bool blocking, bool interprocess) {
            (void)blocking;  // host waits spin briefly, then sleep, either way
            if (interprocess) {
              throw nb::value_error(
                  "Event(interprocess=True): mpsrt events cannot be shared between processes; "
                  "use interprocess=False");
            }
            new (self) Event(enable_timing);
          },
          nb::arg("enable_timing") = false, nb::arg("blocking") = false,
          nb::arg("interprocess") = false,
          "An event (torch.cuda.Event's keywords). blocking is accepted: a host wait spins "
          "for MPSRT_CPU_SPIN_US, then sleeps, in both modes.")
      .def(
          "record",
          [](Event& e, OptStreamArg stream) {
            const Stream s = stream.is_none() ? current_stream(e.device() < 0 ? -1 : e.device())
                                              : stream.get("Event.record()");
            nb::gil_scoped_release release;  // the stream's lock may be held by a committer
            e.record(s);
          },
          nb::arg("stream") = nb::none(),
          "Records the event after the stream's work so far.\n"
          "\n"
          "Args:\n"
          "    stream: The mpsrt.Stream, or None for the current stream (of the event's\n"
          "        device once recorded, else of the current device).\n"
          "\n"
          "Raises:\n"
          "    TypeError: stream is neither an mpsrt.Stream nor None.")
      .def(
          "wait",
          [](const Event& e, OptStreamArg stream) {
            if (stream.is_none()) {
              nb::gil_scoped_release release;  // may commit the recording stream
              e.wait();
            } else {
              const Stream s = stream.get("Event.wait()");
              nb::gil_scoped_release release;
              e.wait(s);
            }
          },
          nb::arg("stream") = nb::none(),
          "Makes a stream's later work wait (on the device) for the event's last record; the\n"
          "host does not block.\n"
          "\n"
          "Args:\n"
          "    stream: The mpsrt.Stream that waits, or None for the current stream.\n"
          "\n"
          "Raises:\n"
          "    TypeError: stream is neither an mpsrt.Stream nor None.")
      .def("query", &Event::query, nb::call_guard<gil_scoped_release>(),
           "Whether the event's last record is done.\n"
           "\n"
           "Returns:\n"
           "    bool: True once the work before the last record has completed (also for an\n"
           "    event never recorded).")
      .def("synchronize", &Event::synchronize, nb::call_guard<gil_scoped_release>(),
           "Waits on the host for the work before the event's last record (returns at once\n"
           "for an event never recorded). A failed command is raised by its stream's\n"
           "synchronize(), not here.")
      .def(
          "elapsed_time",
          [](const Event& e, EventArg end) {
            const Event& last = end.get("elapsed_time()");
            nb::gil_scoped_release release;  // waits for both events to complete
            return e.elapsed_time(last);
          },
          nb::arg("end_event"),
          "The time from this event to end_event, from device timestamps.\n"
          "\n"
          "Waits for both events to complete first (as torch.mps).\n"
          "\n"
          "Args:\n"
          "    end_event: An mpsrt.Event recorded after this one.\n"
          "\n"
          "Returns:\n"
          "    float: Milliseconds.\n"
          "\n"
          "Raises:\n"
          "    TypeError: end_event is not an mpsrt.Event.\n"
          "    ValueError: Either event was made without enable_timing=True, or was not\n"
          "        recorded.")
      .def_prop_ro("enable_timing", &Event::enable_timing,
                   "bool: Whether the event records timestamps (Event(enable_timing=True)).")
      .def_prop_ro(
          "device",
          [](const Event& e) -> std::optional<int> {
            if (e.device() < 0) return std::nullopt;
            return e.device();
          },
          "int | None: The index of the device of the event's last record, or None before\n"
          "the first.")
      .def_prop_ro("event_id", &Event::id, "int: The event's id, unique in the process.")
      .def("__repr__", [](const Event& e) {
        return "mpsrt.Event(enable_timing=" + std::string(e.enable_timing() ? "True" : "False") +
               ", device=" + (e.device() < 0 ? "None" : std::to_string(e.device())) +
               ", recorded=" + (e.recorded() ? "True" : "False") + ")";
      });
}

}  // namespace

void init_stream(nb::module_& m) {
  // Event first: Stream's methods name it in their signatures.
  nb::class_<Event> event(
      m, "Event",
      "A marker in a stream's work, for ordering and timing, as torch.cuda.Event.\n"
      "\n"
      "Args:\n"
      "    enable_timing: Record device timestamps, for elapsed_time().\n"
      "    blocking: Accepted for torch's signature: a host wait spins for\n"
      "        MPSRT_CPU_SPIN_US, then sleeps, either way.\n"
      "    interprocess: Must be False.\n"
      "\n"
      "Raises:\n"
      "    ValueError: interprocess is True (mpsrt events stay in their process).\n"
      "\n"
      "Example:\n"
      "    >>> import mpsrt\n"
      "    >>> start = mpsrt.Event(enable_timing=True)\n"
      "    >>> end = mpsrt.Event(enable_timing=True)\n"
      "    >>> start.record()\n"
      "    >>> buf = mpsrt.empty(1 << 20).fill_(7)\n"
      "    >>> end.record()\n"
      "    >>> end.synchronize()\n"
      "    >>> end.query(), start.elapsed_time(end) >= 0.0\n"
      "    (True, True)\n"
      "    >>> mpsrt.Event().elapsed_time(end)\n"
      "    Traceback (most recent call last):\n"
      "    ...\n"
      "    ValueError: [event] elapsed_time: Both events must be created with argument ...\n");
  bind_stream(m);
  bind_event(event);
  m.def(
      "current_stream", [](int device) { return current_stream(device); }, nb::arg("device") = -1);
  m.def(
      "default_stream", [](int device) { return default_stream(device); }, nb::arg("device") = -1);
  m.def("set_stream", &set_current_stream, nb::arg("stream"),
        "Makes stream current on its device for this thread; returns the previous one.");
}

}  // namespace mpsrt::python
