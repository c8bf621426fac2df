// The profiler's recorder: sessions, per-thread bounded record buffers, ranges and marks, the
// stream and allocator hooks, and the hook of a platform sink (PlatformSink: os_signpost, the
// metal backend's trace sink, which the runtime installs while that backend runs).
#include "core/profiler.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "core/allocator/caching_allocator.h"
#include "core/allocator/stats.h"
#include "core/profiler_records.h"
#include "core/runtime.h"
#include "core/spin_lock.h"
#include "mpsrt/error.h"
#include "mpsrt/profiler.h"
#include "mpsrt/stream.h"

namespace mpsrt::detail::prof {

std::atomic<uint32_t> g_flags{0};

namespace {

constexpr size_t kChunk = 4096;  // records per allocation of a thread's buffer

std::atomic<uint64_t> g_session{0};         // bumped by every start()
std::atomic<uint64_t> g_capacity{1 << 20};  // records per thread (MPSRT_PROFILE_RECORDS)
std::atomic<uint32_t> g_log{0};             // MPSRT_LOG_PROFILE_INFO of the session
std::atomic<uint64_t> g_flow{0};

std::atomic<PlatformSink*> g_sink{nullptr};  // set_platform_sink(); never destroyed here

/// The installed platform sink or nullptr. Cost: one acquire load.
PlatformSink* platform_sink() noexcept {
  return g_sink.load(std::memory_order_acquire);
}

int current_tid() {
#if defined(__linux__)
  return static_cast<int>(syscall(SYS_gettid));
#elif defined(__APPLE__)
  uint64_t id = 0;
  pthread_threadid_np(nullptr, &id);
  return static_cast<int>(id);
#else
  return 0;
#endif
}

/// One thread's records. The owner appends under the lock (uncontended unless an export or a
/// start() reads it at that moment); records of an older session are dropped on first use.
struct ThreadBuffer {
  SpinLock mu;
  uint64_t session = 0;
  std::vector<std::unique_ptr<Record[]>> chunks;
  uint64_t count = 0;
  uint64_t dropped = 0;
  std::vector<std::string> strings;
  std::unordered_map<std::string, uint32_t> ids;
  int tid = current_tid();
  std::string name;

  ThreadBuffer() {
    char buf[64] = {};
    if (pthread_getname_np(pthread_self(), buf, sizeof buf) == 0) name = buf;
  }
  void renew_locked(uint64_t s) {
    session = s;
    count = 0;
    dropped = 0;
    if (chunks.size() > 1) chunks.resize(1);
    strings.clear();
    ids.clear();
  }
  void sync_locked() {
    const uint64_t s = g_session.load(std::memory_order_acquire);
    if (MPSRT_UNLIKELY(session != s)) renew_locked(s);
  }
  // Cost: a compare and a 56-byte store; a new chunk every 4096 records.
  void push_locked(const Record& r) {
    if (MPSRT_UNLIKELY(count >= g_capacity.load(std::memory_order_relaxed))) {
      ++dropped;
      return;
    }
    if (MPSRT_UNLIKELY(count == chunks.size() * kChunk)) {
      chunks.emplace_back(new Record[kChunk]);
    }
    chunks[count / kChunk][count % kChunk] = r;
    ++count;
  }
  uint32_t intern_locked(std::string_view s) {
    auto [it, inserted] = ids.try_emplace(std::string(s), static_cast<uint32_t>(strings.size()));
    if (inserted) strings.emplace_back(s);
    return it->second;
  }
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
};
Registry& registry() {
  static auto* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

thread_local ThreadBuffer* tls_buffer = nullptr;  // the calling thread's, once it has one

ThreadBuffer& local_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> tb = [] {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.buffers.push_back(b);
    tls_buffer = b.get();
    return b;
  }();
  return *tb;
}

/// Appends records to the calling thread's buffer under one lock.
template <class F>
void with_buffer(F&& f) {
  ThreadBuffer& t = local_buffer();
  std::lock_guard<SpinLock> lock(t.mu);
  t.sync_locked();
  f(t);
}

void push(const Record& r) {
  with_buffer([&](ThreadBuffer& t) { t.push_locked(r); });
}

std::mutex& session_mutex() {
  static std::mutex mu;
  return mu;
}

/// An open range of the calling thread. `session` is 0 when it began outside a session.
struct OpenRange {
  std::string message;
  int64_t begin = 0;
  uint64_t session = 0;
  PlatformSink* sink = nullptr;  // the sink that began it, if any
  uint64_t sink_id = 0;          // its id there
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

Snapshot snapshot(Runtime* rt) {
  Snapshot s;
  s.pid = static_cast<int>(getpid());
  const uint64_t session = g_session.load(std::memory_order_acquire);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& b : r.buffers) {
      std::lock_guard<SpinLock> bl(b->mu);
      if (b->session != session || (b->count == 0 && b->dropped == 0)) continue;
      ThreadRecords t;
      t.tid = b->tid;
      t.name = b->name;
      t.dropped = b->dropped;
      t.strings = b->strings;
      t.records.reserve(b->count);
      for (uint64_t i = 0; i < b->count; i += kChunk) {
        const Record* c = b->chunks[i / kChunk].get();
        t.records.insert(t.records.end(), c, c + std::min<uint64_t>(kChunk, b->count - i));
      }
      s.threads.push_back(std::move(t));
    }
  }
  if (rt != nullptr) {
    for (DeviceContext* d : rt->open_devices()) {
      const DeviceProperties p = d->properties(rt->backend().name());
      s.devices.push_back({d->index(), p.backend + ": " + p.name});
    }
  }
  return s;
}

void print_statistics_locked(Runtime* rt) {
  const uint32_t log = g_log.load(std::memory_order_relaxed);
  const Snapshot s = snapshot(rt);
  if ((log & (kLogAllStats | kLogOperationStats | kLogCopyStats | kLogCpuFallbackStats)) != 0) {
    std::fputs(format_statistics(s, log).c_str(), stderr);
  }
  if (s.dropped() != 0) {
    std::fprintf(stderr,
                 "[profiler] %llu records were dropped: a thread's buffer was full "
                 "(MPSRT_PROFILE_RECORDS=%llu per thread); raise it for complete traces\n",
                 static_cast<unsigned long long>(s.dropped()),
                 static_cast<unsigned long long>(g_capacity.load()));
  }
  std::fflush(stderr);
}

void begin_locked(Runtime& rt, uint32_t flags) {
  const Options& o = rt.options();
  if ((o.trace_signposts & kTraceWaitUntilCompleted) != 0) flags |= kWait;
  if ((o.trace_signposts & kTraceIncludeSchedule) != 0) flags |= kSchedule;
  g_capacity.store(o.profile_records);
  g_log.store(o.log_profile_info);
  g_session.fetch_add(1, std::memory_order_acq_rel);
  {
    // Buffers of threads that have exited and whose records are gone with the last session.
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<std::shared_ptr<ThreadBuffer>> keep;
    for (auto& b : r.buffers) {
      if (b.use_count() > 1) keep.push_back(std::move(b));
    }
    r.buffers.swap(keep);
  }
  g_flags.store(flags, std::memory_order_release);
  // Counters start at the devices' current levels.
  for (DeviceContext* d : rt.open_devices()) {
    d->allocator().locked([&](const auto&) { d->allocator_trace().sample(); });
  }
}

bool g_exit_report = false;  // an environment-started session prints its statistics at exit
bool g_env_session = false;  // the running session was started by MPSRT_TRACE_SIGNPOSTS

void report_at_exit() {
  std::lock_guard<std::mutex> lock(session_mutex());
  if (flags() == 0) return;
  g_flags.store(0);
  print_statistics_locked(nullptr);
}

void log_op(const char* what, const Batch& b, const PendingOp& op, uint64_t gpu_ns) {
  const uint32_t log = g_log.load(std::memory_order_relaxed);
  char extra[160] = {};
  int n = 0;
  const auto add = [&](const char* fmt, auto... args) {
    if (n >= 0 && static_cast<size_t>(n) < sizeof extra) {
      n += std::snprintf(extra + n, sizeof extra - static_cast<size_t>(n), fmt, args...);
    }
  };
  if ((log & kLogIncludeGpuTime) != 0) add(", GPU=%.3f ms", static_cast<double>(gpu_ns) / 1e6);
  if ((log & kLogIncludeKernelTime) != 0) {
    add(", KRNL=%.3f ms", static_cast<double>(op.device_end - op.device_begin) / 1e6);
  }
  if ((log & kLogIncludeBufferId) != 0) {
    add(", buffer=%#llx", static_cast<unsigned long long>(op.desc.buffer_id));
  }
  std::fprintf(stderr, "[profiler] %s %s: device %d stream %lld, %llu bytes%s\n", what,
               op_name(op.desc.op), b.device, static_cast<long long>(b.stream),
               static_cast<unsigned long long>(op.desc.bytes), extra);
}

}  // namespace

PlatformSink* set_platform_sink(PlatformSink* sink) noexcept {
  return g_sink.exchange(sink, std::memory_order_acq_rel);
}

const char* op_name(Op op) noexcept {
  static constexpr const char* kNames[] = {
      "fill",       "copy",           "copy_from_host", "random_bits",   "uniform",
      "normal",     "random_int",     "bernoulli",      "host_callback", "event_record",
      "event_wait", "command_buffer", "copy_to_host"};
  static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(Op::kCount));
  const auto i = static_cast<size_t>(op);
  return MPSRT_LIKELY(i < static_cast<size_t>(Op::kCount)) ? kNames[i] : "unknown";
}

Batch* new_batch(int device, int64_t stream, int64_t host_offset_ns) {
  auto* b = new Batch;
  b->session = g_session.load(std::memory_order_acquire);
  b->flags = flags();
  b->device = device;
  b->stream = stream;
  b->host_offset_ns = host_offset_ns;
  return b;
}

PendingOp& add_op(Batch& b, const OpDesc& d) {
  PendingOp& op = b.ops.emplace_back();
  op.desc = d;
  op.flow = g_flow.fetch_add(1, std::memory_order_relaxed) + 1;
  return op;
}

void record_encode(const Batch& b, const PendingOp& op) {
  if ((b.flags & kIntervals) == 0) return;
  Record r;
  r.begin = op.host_begin;
  r.end = op.host_end;
  r.a = op.desc.bytes;
  r.b = op.flow;
  r.name = static_cast<uint32_t>(op.desc.op);
  r.kind = Kind::Encode;
  r.device = static_cast<uint8_t>(b.device);
  r.stream = static_cast<int32_t>(b.stream);
  push(r);
  if (PlatformSink* sink = platform_sink()) {
    sink->encode(op_name(op.desc.op), b.stream, op.desc.bytes);
  }
}

void complete(const Batch& b, const backend::Completion& c) {
  if (b.session != g_session.load(std::memory_order_acquire)) return;  // a newer session
  const int64_t done = now_ns();
  const int64_t off = b.host_offset_ns;
  const uint32_t log = g_log.load(std::memory_order_relaxed);
  const uint64_t gpu_ns = c.device_end_ns - c.device_start_ns;
  with_buffer([&](ThreadBuffer& t) {
    Record r;
    r.device = static_cast<uint8_t>(b.device);
    r.stream = static_cast<int32_t>(b.stream);
    if ((b.flags & kIntervals) != 0) {
      r.kind = Kind::CommandBuffer;
      r.name = static_cast<uint32_t>(Op::CommandBuffer);
      r.begin =
          (b.flags & kSchedule) != 0 ? b.commit_ns : static_cast<int64_t>(c.device_start_ns) + off;
      r.end = static_cast<int64_t>(c.device_end_ns) + off;
      r.a = b.ops.size();
      r.b = static_cast<uint64_t>(b.commit_ns);
      r.c = static_cast<uint64_t>(done);
      t.push_locked(r);
    }
    for (const PendingOp& op : b.ops) {
      if (op.device_end == 0) continue;  // not reached (the command buffer failed early)
      r.name = static_cast<uint32_t>(op.desc.op);
      r.begin = static_cast<int64_t>(op.device_begin) + off;
      r.end = static_cast<int64_t>(op.device_end) + off;
      r.a = op.desc.bytes;
      r.b = op.flow;
      r.c = op.device_end - op.device_begin;
      if ((b.flags & kIntervals) != 0) {
        r.kind = Kind::Device;
        t.push_locked(r);
      }
      if ((b.flags & kEvents) != 0) {
        r.kind = Kind::Completion;
        r.begin = r.end;
        t.push_locked(r);
      }
    }
  });
  if ((log & (kLogOperationInfo | kLogCopyInfo)) != 0) {
    for (const PendingOp& op : b.ops) {
      if ((log & (is_copy(op.desc.op) ? kLogCopyInfo : kLogOperationInfo)) != 0) {
        log_op(is_copy(op.desc.op) ? "copy" : "operation", b, op, gpu_ns);
      }
    }
  }
  if (PlatformSink* sink = platform_sink()) {
    for (const PendingOp& op : b.ops) {
      sink->completed(op_name(op.desc.op), b.stream, op.device_end - op.device_begin);
    }
  }
}

void record_host_copy(Op op, int device, uint64_t bytes, int64_t begin_ns, int64_t end_ns) {
  const uint32_t f = flags();
  if (f == 0) return;
  Record r;
  r.begin = begin_ns;
  r.end = end_ns;
  r.a = bytes;
  r.name = static_cast<uint32_t>(op);
  r.kind = Kind::HostCopy;
  r.device = static_cast<uint8_t>(device);
  r.stream = -1;
  push(r);
  if ((g_log.load(std::memory_order_relaxed) & kLogCopyInfo) != 0) {
    std::fprintf(stderr, "[profiler] copy %s: device %d, %llu bytes, CPU=%.3f ms\n", op_name(op),
                 device, static_cast<unsigned long long>(bytes),
                 static_cast<double>(end_ns - begin_ns) / 1e6);
  }
}

void start_from_options(Runtime& rt) {
  const Options& o = rt.options();
  if (o.trace_signposts == 0) return;
  uint32_t modes = 0;
  if ((o.trace_signposts & (kTraceAllIntervals | kTraceUseIntervals)) != 0) modes |= kIntervals;
  if ((o.trace_signposts & (kTraceAllEvents | kTraceUseEvents)) != 0) modes |= kEvents;
  if (modes == 0) modes = kIntervals;
  std::lock_guard<std::mutex> lock(session_mutex());
  if (flags() != 0) return;
  begin_locked(rt, modes);
  g_env_session = true;
  if (!g_exit_report) {
    g_exit_report = true;
    std::atexit(report_at_exit);
  }
}

void reset() {
  std::lock_guard<std::mutex> lock(session_mutex());
  g_flags.store(0);
  range_stack().clear();
}

void fork_prepare() {
  session_mutex().lock();
  registry().mu.lock();
  async_ranges().mu.lock();
}

void fork_parent() {
  async_ranges().mu.unlock();
  registry().mu.unlock();
  session_mutex().unlock();
}

void fork_child() {
  g_flags.store(0);
  // Other threads' buffers may be locked by threads that do not exist here.
  Registry& r = registry();
  std::vector<std::shared_ptr<ThreadBuffer>> keep;
  for (auto& b : r.buffers) {
    if (b.get() == tls_buffer) keep.push_back(std::move(b));
  }
  r.buffers.swap(keep);
  r.mu.unlock();
  async_ranges().mu.unlock();  // open ranges stay open in the child: it may end them
  session_mutex().unlock();
}

void AllocatorTrace::on_event(const AllocEvent& e) {
  if (MPSRT_LIKELY(flags() == 0)) return;
  Record r;
  r.begin = r.end = now_ns();
  r.a = e.size;
  r.b = e.address;
  r.device = static_cast<uint8_t>(device_);
  r.stream = e.pool;
  bool counters = true;
  switch (e.action) {
    case AllocAction::Alloc:
      r.kind = Kind::Alloc;
      break;
    case AllocAction::FreeRequested:
      r.kind = Kind::Free;
      break;
    case AllocAction::SegmentAlloc:
      r.kind = Kind::SegmentAlloc;
      break;
    case AllocAction::SegmentFree:
      r.kind = Kind::SegmentFree;
      break;
    case AllocAction::Oom:
      r.kind = Kind::Oom;
      r.a = e.requested;
      counters = false;
      break;
    case AllocAction::EmptyCache:
      r.kind = Kind::EmptyCache;
      counters = false;
      break;
    case AllocAction::Retry:
    case AllocAction::SyncAllStreams:
    case AllocAction::FreeCompleted:
      return;
  }
  with_buffer([&](ThreadBuffer& t) {
    t.push_locked(r);
    if (counters) t.push_locked(counter_record(r.begin));
  });
}

void AllocatorTrace::sample() const {
  if (flags() != 0) push(counter_record(now_ns()));
}

Record AllocatorTrace::counter_record(int64_t at) const {
  Record c;
  c.begin = c.end = at;
  c.kind = Kind::Counter;
  c.device = static_cast<uint8_t>(device_);
  c.a = static_cast<uint64_t>(stats_.allocated_bytes[0].current);
  c.b = static_cast<uint64_t>(stats_.reserved_bytes[0].current);
  return c;
}

uint64_t Snapshot::records() const {
  uint64_t n = 0;
  for (const ThreadRecords& t : threads) n += t.records.size();
  return n;
}

uint64_t Snapshot::dropped() const {
  uint64_t n = 0;
  for (const ThreadRecords& t : threads) n += t.dropped;
  return n;
}

std::string_view record_name(const ThreadRecords& t, const Record& r) {
  if (r.kind == Kind::Mark || r.kind == Kind::Range || r.kind == Kind::AsyncRange ||
      r.kind == Kind::HostOp) {
    return r.name < t.strings.size() ? std::string_view(t.strings[r.name]) : "unknown";
  }
  switch (r.kind) {
    case Kind::Alloc:
      return "alloc";
    case Kind::Free:
      return "free";
    case Kind::SegmentAlloc:
      return "heap_alloc";
    case Kind::SegmentFree:
      return "heap_free";
    case Kind::Oom:
      return "out_of_memory";
    case Kind::EmptyCache:
      return "empty_cache";
    case Kind::Counter:
      return "memory";
    default:  // checked before the cast: an Op is 8 bits, a name 32
      return r.name < static_cast<uint32_t>(Op::kCount) ? op_name(static_cast<Op>(r.name))
                                                        : "unknown";
  }
}

}  // namespace mpsrt::detail::prof

namespace mpsrt::profiler {

using detail::Runtime;
namespace prof = detail::prof;

void start(unsigned modes, bool wait_until_completed) {
  if (modes == 0 || modes > (kInterval | kEvent)) {
    detail::throw_invalid(
        "[profiler] start: modes must combine kInterval (1) and kEvent (2), got " +
        std::to_string(modes));
  }
  Runtime& rt = Runtime::get();
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  if (prof::flags() != 0) {
    detail::throw_error(std::string("[profiler] start: a session is already running") +
                        (prof::g_env_session ? " (started by MPSRT_TRACE_SIGNPOSTS)" : "") +
                        "; stop() it first");
  }
  prof::g_env_session = false;
  prof::begin_locked(rt, modes | (wait_until_completed ? prof::kWait : 0u));
}

void stop() {
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  if (prof::flags() == 0) return;
  prof::g_flags.store(0, std::memory_order_release);
  Runtime& rt = Runtime::get();
  // The work profiled so far completes now, so that its device intervals are in the session.
  for (detail::DeviceContext* d : rt.open_devices()) d->wait_idle();
  prof::print_statistics_locked(&rt);
}

bool is_active() noexcept {
  return prof::flags() != 0;
}

void mark(std::string_view message) {
  if (MPSRT_LIKELY(prof::flags() == 0)) return;
  prof::Record r;
  r.begin = r.end = prof::now_ns();
  r.kind = prof::Kind::Mark;
  prof::with_buffer([&](prof::ThreadBuffer& t) {
    r.name = t.intern_locked(message);
    t.push_locked(r);
  });
  if (prof::PlatformSink* sink = prof::platform_sink()) sink->mark(message);
}

namespace {
// A range's start: its message, session and begin time are kept only while a session runs.
void open_range(prof::OpenRange& r, std::string_view message) {
  if (prof::flags() == 0) return;
  r.message = message;
  r.session = prof::g_session.load(std::memory_order_acquire);
  r.begin = prof::now_ns();
  if (prof::PlatformSink* sink = prof::platform_sink()) {
    r.sink_id = sink->range_begin(r.message);
    r.sink = sink;
  }
}

// A range's end: recorded when the session it began in still runs.
void close_range(const prof::OpenRange& r, prof::Kind kind, uint64_t a) {
  if (r.sink != nullptr) r.sink->range_end(r.sink_id);
  if (r.session == 0 || prof::flags() == 0 ||
      r.session != prof::g_session.load(std::memory_order_acquire)) {
    return;
  }
  prof::Record rec;
  rec.begin = r.begin;
  rec.end = prof::now_ns();
  rec.kind = kind;
  rec.a = a;
  prof::with_buffer([&](prof::ThreadBuffer& t) {
    rec.name = t.intern_locked(r.message);
    t.push_locked(rec);
  });
}
}  // namespace

int range_push(std::string_view message) {
  auto& stack = prof::range_stack();
  open_range(stack.emplace_back(), message);
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
  close_range(r, prof::Kind::Range, static_cast<uint64_t>(depth));
  return depth;
}

int64_t range_start(std::string_view message) {
  prof::OpenRange r;
  open_range(r, message);
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
  close_range(r, prof::Kind::AsyncRange, static_cast<uint64_t>(id));
}

int64_t host_op_begin() noexcept {
  return MPSRT_LIKELY(prof::flags() == 0) ? 0 : prof::now_ns();
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
  if ((prof::g_log.load(std::memory_order_relaxed) & prof::kLogCpuFallbackInfo) != 0) {
    std::fprintf(stderr, "[profiler] host op %.*s: device %d, stream %lld, CPU=%.3f ms\n",
                 static_cast<int>(name.size()), name.data(), stream.device(),
                 static_cast<long long>(stream.id()), static_cast<double>(r.end - r.begin) / 1e6);
  }
}

TraceSummary export_trace(const std::string& path) {
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  return prof::write_trace_json(prof::snapshot(&Runtime::get()), path);
}

namespace {
std::mutex g_capture_mu;
std::atomic<int> g_capture_device{-1};  // the captured device's index, -1 when none
}  // namespace

bool capture_available() {
  return Runtime::get().device(-1).backend_device().capture_available(nullptr);
}

void begin_capture(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (g_capture_device.load() >= 0) {
    detail::throw_error("[profiler] begin_capture: a GPU capture already runs; end it first");
  }
  Runtime& rt = Runtime::get();
  const int index = rt.resolve(-1);
  backend::Device& dev = rt.device(index).backend_device();
  std::string why;
  if (!dev.capture_available(&why)) detail::throw_error("[profiler] begin_capture: " + why);
  dev.begin_capture(path);
  g_capture_device.store(index);
}

void end_capture() {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  const int index = g_capture_device.load();
  if (index < 0) return;
  g_capture_device.store(-1);
  detail::DeviceContext& d = Runtime::get().device(index);
  d.wait_idle();  // the captured work completes inside the capture
  d.backend_device().end_capture();
}

bool is_capturing() noexcept {
  return g_capture_device.load() >= 0;
}

std::string statistics() {
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  return prof::format_statistics(prof::snapshot(&Runtime::get()), 0);
}

}  // namespace mpsrt::profiler
