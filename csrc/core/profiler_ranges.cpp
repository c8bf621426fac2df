// The profiler's annotations of mpsrt/profiler.h: marks, per-thread nested ranges
// (range_push / range_pop), ranges any thread may end (range_start / range_end) and host ops,
// recorded on the calling thread's buffer while a session runs and sent to the platform sink.
#include "core/profiler_ranges.h"

#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/profiler.h"
#include "core/profiler_records.h"
#include "core/profiler_session.h"
#include "core/stream.h"
#include "mpsrt/error.h"
#include "mpsrt/profiler.h"
#include "mpsrt/stream.h"

namespace mpsrt::detail::prof {

namespace {

/// An open range of the calling thread. `session` is 0 when it began outside a session.
struct OpenRange {
  std::string message;
  int64_t begin = 0;
  uint64_t session = 0;
  backend::TraceSink* sink = nullptr;  // the sink that began it, if any
  uint64_t sink_id = 0;                // its id there
};
std::vector<OpenRange>& range_stack() {
  thread_local std::vector<OpenRange> stack;
  return stack;
}

/// The ranges range_start() opened and range_end() has not closed yet, by id.
struct AsyncRanges {
  std::mutex mu;
  int64_t next_id = 1;
  std::unordered_map<int64_t, OpenRange> open;
};
AsyncRanges& async_ranges() {
  static AsyncRanges* r = new AsyncRanges;  // used from atexit and fork handlers: never freed
  return *r;
}

// A range's start: its message, session and begin time are kept only while a session runs.
void open_range(OpenRange& r, std::string_view message) {
  if (flags() == 0) return;
  r.message = message;
  r.session = session();
  r.begin = now_ns();
  if (backend::TraceSink* sink = platform_sink()) {
    r.sink_id = sink->range_begin(r.message);
    r.sink = sink;
  }
}

// A range's end: recorded when the session it began in still runs.
void close_range(const OpenRange& r, Kind kind, uint64_t a) {
  if (r.sink != nullptr) r.sink->range_end(r.sink_id);
  if (r.session == 0 || flags() == 0 || r.session != session()) return;
  Record rec;
  rec.begin = r.begin;
  rec.end = now_ns();
  rec.kind = kind;
  rec.a = a;
  with_buffer([&](ThreadBuffer& t) {
    rec.name = t.intern_locked(r.message);
    t.push_locked(rec);
  });
}

}  // namespace

void clear_thread_ranges() {
  range_stack().clear();
}

std::mutex& async_ranges_mutex() {
  return async_ranges().mu;
}

}  // namespace mpsrt::detail::prof

namespace mpsrt::profiler {

namespace prof = detail::prof;

void mark(std::string_view message) {
  if (MPSRT_LIKELY(prof::flags() == 0)) return;
  prof::Record r;
  r.begin = r.end = prof::now_ns();
  r.kind = prof::Kind::Mark;
  prof::with_buffer([&](prof::ThreadBuffer& t) {
    r.name = t.intern_locked(message);
    t.push_locked(r);
  });
  if (backend::TraceSink* sink = prof::platform_sink()) sink->mark(message);
}

int range_push(std::string_view message) {
  auto& stack = prof::range_stack();
  prof::open_range(stack.emplace_back(), message);
  return static_cast<int>(stack.size()) - 1;
}

int range_pop() {
  auto& stack = prof::range_stack();
  if (stack.empty()) {
    detail::throw_error(
        "[profiler] range_pop: no range is open on this thread; every range_pop() must follow "
        "a range_push() on the same thread");
  }
  const prof::OpenRange r = std::move(stack.back());
  stack.pop_back();
  const int depth = static_cast<int>(stack.size());
  prof::close_range(r, prof::Kind::Range, static_cast<uint64_t>(depth));
  return depth;
}

int64_t range_start(std::string_view message) {
  prof::OpenRange r;
  prof::open_range(r, message);
  prof::AsyncRanges& ranges = prof::async_ranges();
  std::lock_guard<std::mutex> lock(ranges.mu);
  const int64_t id = ranges.next_id++;
  ranges.open.emplace(id, std::move(r));
  return id;
}

void range_end(int64_t id) {
  prof::OpenRange r;
  {
    prof::AsyncRanges& ranges = prof::async_ranges();
    std::lock_guard<std::mutex> lock(ranges.mu);
    auto it = ranges.open.find(id);
    if (it == ranges.open.end()) {
      detail::throw_invalid("[profiler] range_end: no range with id " + std::to_string(id) +
                            " is open; pass an id that range_start() returned, once");
    }
    r = std::move(it->second);
    ranges.open.erase(it);
  }
  prof::close_range(r, prof::Kind::AsyncRange, static_cast<uint64_t>(id));
}

int64_t host_op_begin() noexcept {
  return MPSRT_LIKELY(prof::flags() == 0) ? 0 : prof::now_ns();
}

int64_t host_op_enter(int device) {
  if (MPSRT_LIKELY(prof::flags() == 0 && detail::Quiet::holds(device))) return 0;
  current_stream(device).synchronize();
  const int64_t begin = host_op_begin();
  if (begin == 0) detail::Quiet::note();
  return begin;
}

void host_op_end(std::string_view name, const Stream& stream, int64_t begin) {
  if (begin == 0 || prof::flags() == 0) return;
  prof::Record r;
  r.begin = begin;
  r.end = prof::now_ns();
  r.kind = prof::Kind::HostOp;
  r.device = static_cast<uint8_t>(stream.device());
  r.stream = static_cast<int32_t>(stream.id());
  prof::with_buffer([&](prof::ThreadBuffer& t) {
    r.name = t.intern_locked(name);
    t.push_locked(r);
  });
  if ((prof::log_bits() & prof::kLogCpuFallbackInfo) != 0) {
    std::fprintf(stderr, "[profiler] host op %.*s: device %d, stream %lld, CPU=%.3f ms\n",
                 static_cast<int>(name.size()), name.data(), stream.device(),
                 static_cast<long long>(stream.id()), static_cast<double>(r.end - r.begin) / 1e6);
  }
}

}  // namespace mpsrt::profiler
