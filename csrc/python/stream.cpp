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
          "(least, greatest) priority, as torch.cuda.Stream.priority_range(): lower numbers run "
          "first; priorities outside the range clamp to it.")
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
  cls.def("query", &Stream::query, "True when all work submitted so far has completed.")
      .def("synchronize", &Stream::synchronize, nb::call_guard<gil_scoped_release>(),
           "Waits for the stream's work; raises RuntimeError if a command failed.")
      .def(
          "wait_event",
          [](Stream& s, EventArg e) {
            Event& ev = e.get("wait_event()");
            nb::gil_scoped_release release;  // may commit the recording stream
            s.wait_event(ev);
          },
          nb::arg("event"), "Later work on this stream waits (on the device) for the event.")
      .def(
          "wait_stream",
          [](Stream& s, StreamArg other) {
            const Stream o = other.get("wait_stream()");
            nb::gil_scoped_release release;  // commits `other`
            s.wait_stream(o);
          },
          nb::arg("stream").none(), nb::sig("def wait_stream(self, stream: Stream) -> None"),
          "Later work on this stream waits for `stream`'s work so far.")
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
          nb::arg("event") = nb::none(), "Records an event (a new one when None) and returns it.")
      .def(
          "add_callback",
          [](Stream& s, nb::typed<nb::callable, void()> fn) {
            PyCallback cb(std::move(fn));
            // Committing may wait on back-pressure for earlier callbacks, which need the GIL.
            nb::gil_scoped_release release;
            s.add_callback(std::move(cb));
          },
          nb::arg("fn"),
          "Runs fn() on a runtime thread once the stream's work so far is done; an exception "
          "in fn is raised by the stream's next synchronize(). fn must not wait for the "
          "device (synchronize(), Buffer.numpy()): it runs as part of the device's work.");
}

void bind_stream(nb::module_& m) {
  nb::class_<Stream> cls(m, "Stream", "An in-order queue of work on a device.");
  bind_stream_context(cls);
  // Identity: the device, id and priority; == and hash() by the stream, not the object.
  cls.def_prop_ro("device", &Stream::device)
      .def_prop_ro("device_index", &Stream::device)
      .def_prop_ro("stream_id", &Stream::id)
      .def_prop_ro("priority", &Stream::priority);
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
          "Marks the point after the stream's work so far (default: the current stream).")
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
          "Makes the stream's later work wait on the device (the host does not block).")
      .def("query", &Event::query, nb::call_guard<gil_scoped_release>(),
           "True once the last record has completed.")
      .def("synchronize", &Event::synchronize, nb::call_guard<gil_scoped_release>(),
           "Waits on the host for the last record.")
      .def(
          "elapsed_time",
          [](const Event& e, EventArg end) {
            const Event& last = end.get("elapsed_time()");
            nb::gil_scoped_release release;  // waits for both events to complete
            return e.elapsed_time(last);
          },
          nb::arg("end_event"), "Milliseconds from this event to end_event (device timestamps).")
      .def_prop_ro("enable_timing", &Event::enable_timing)
      .def_prop_ro("device",
                   [](const Event& e) -> std::optional<int> {
                     if (e.device() < 0) return std::nullopt;
                     return e.device();
                   })
      .def_prop_ro("event_id", &Event::id)
      .def("__repr__", [](const Event& e) {
        return "mpsrt.Event(enable_timing=" + std::string(e.enable_timing() ? "True" : "False") +
               ", device=" + (e.device() < 0 ? "None" : std::to_string(e.device())) +
               ", recorded=" + (e.recorded() ? "True" : "False") + ")";
      });
}

}  // namespace

void init_stream(nb::module_& m) {
  // Event first: Stream's methods name it in their signatures.
  nb::class_<Event> event(m, "Event", "A marker in a stream's work, for ordering and timing.");
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
