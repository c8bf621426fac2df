// The C API's streams, events and the profiler's host operations (include/mpsrt/c_api.h). A
// stream handle is stable for the life of the runtime; an event handle owns one mpsrt::Event.
// Every call into the runtime is qualified (mpsrt::...): an unqualified one would find the
// entry of the same name first.
#include "mpsrt/stream.h"
#include "c_api/internal.h"
#include "mpsrt/event.h"
#include "mpsrt/profiler.h"

namespace mpsrt::c_api {
namespace {

MpsrtStream* stream_default(int device) noexcept {
  MpsrtStream* s = nullptr;
  guarded([&] { s = handle(mpsrt::default_stream(device)); });
  return s;
}

MpsrtStream* stream_current(int device) noexcept {
  MpsrtStream* s = nullptr;
  guarded([&] { s = handle(mpsrt::current_stream(device)); });
  return s;
}

MpsrtStatus stream_from_pool(int priority, int device, MpsrtStream** out) noexcept {
  return guarded([&] {
    *need(out, "stream_from_pool", "out") = handle(mpsrt::stream_from_pool(priority, device));
  });
}

MpsrtStream* stream_set_current(MpsrtStream* s) noexcept {
  MpsrtStream* prev = nullptr;
  guarded([&] { prev = handle(mpsrt::set_current_stream(stream_of_handle(s))); });
  return prev;
}

int stream_device(MpsrtStream* s) noexcept {
  return s != nullptr ? stream_of_handle(s).device() : -1;
}

int stream_priority(MpsrtStream* s) noexcept {
  return s != nullptr ? stream_of_handle(s).priority() : 0;
}

MpsrtStatus stream_synchronize(MpsrtStream* s) noexcept {
  return guarded([&] { stream_of_handle(s).synchronize(); });
}

int stream_query(MpsrtStream* s) noexcept {
  bool done = false;
  const MpsrtStatus st = guarded([&] { done = stream_of_handle(s).query(); });
  return query_to_int(st, done);
}

MpsrtStatus event_create(int enable_timing, MpsrtEvent** out) noexcept {
  return guarded([&] {
    *need(out, "event_create", "out") =
        reinterpret_cast<MpsrtEvent*>(new Event(enable_timing != 0));
  });
}

void event_destroy(MpsrtEvent* e) noexcept {
  delete ev(e);
}

MpsrtStatus event_record(MpsrtEvent* e, MpsrtStream* s) noexcept {
  return guarded([&] { need(ev(e), "event_record", "event")->record(stream_of_handle(s)); });
}

MpsrtStatus event_wait(MpsrtEvent* e, MpsrtStream* s) noexcept {
  return guarded([&] { need(ev(e), "event_wait", "event")->wait(stream_of_handle(s)); });
}

int event_query(MpsrtEvent* e) noexcept {
  bool done = false;
  const MpsrtStatus st = guarded([&] { done = need(ev(e), "event_query", "event")->query(); });
  return query_to_int(st, done);
}

MpsrtStatus event_synchronize(MpsrtEvent* e) noexcept {
  return guarded([&] { need(ev(e), "event_synchronize", "event")->synchronize(); });
}

MpsrtStatus event_elapsed_ms(MpsrtEvent* start, MpsrtEvent* end, double* ms) noexcept {
  return guarded([&] {
    const Event& a = *need(ev(start), "event_elapsed_ms", "start");
    const Event& b = *need(ev(end), "event_elapsed_ms", "end");
    *need(ms, "event_elapsed_ms", "ms") = a.elapsed_time(b);
  });
}

int64_t host_op_begin() noexcept {
  return mpsrt::profiler::host_op_begin();
}

MpsrtStatus host_op_enter(int device, int64_t* begin) noexcept {
  return guarded(
      [&] { *need(begin, "host_op_enter", "begin") = mpsrt::profiler::host_op_enter(device); });
}

void host_op_end(const char* name, MpsrtStream* s, int64_t begin) noexcept {
  guarded([&] { mpsrt::profiler::host_op_end(name ? name : "", stream_of_handle(s), begin); });
}

}  // namespace

void fill_stream(MpsrtCApi& t) {
  t.stream_default = stream_default;
  t.stream_current = stream_current;
  t.stream_from_pool = stream_from_pool;
  t.stream_set_current = stream_set_current;
  t.stream_device = stream_device;
  t.stream_priority = stream_priority;
  t.stream_synchronize = stream_synchronize;
  t.stream_query = stream_query;
  t.event_create = event_create;
  t.event_destroy = event_destroy;
  t.event_record = event_record;
  t.event_wait = event_wait;
  t.event_query = event_query;
  t.event_synchronize = event_synchronize;
  t.event_elapsed_ms = event_elapsed_ms;
  t.host_op_begin = host_op_begin;
  t.host_op_end = host_op_end;
  t.host_op_enter = host_op_enter;
}

}  // namespace mpsrt::c_api
