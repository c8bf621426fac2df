// The profiler's session and its per-thread record buffers (see profiler_session.h).
#include "core/profiler_session.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

namespace mpsrt::detail::prof {

std::atomic<uint32_t> g_flags{0};
std::atomic<uint64_t> g_session{0};
std::atomic<uint64_t> g_capacity{1 << 20};
std::atomic<uint32_t> g_log{0};
std::atomic<backend::TraceSink*> g_sink{nullptr};

namespace {

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

}  // namespace

ThreadBuffer::ThreadBuffer() : tid(current_tid()) {
  char buf[64] = {};
  if (pthread_getname_np(pthread_self(), buf, sizeof buf) == 0) name = buf;
}

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

std::mutex& session_mutex() {
  static std::mutex mu;
  return mu;
}

backend::TraceSink* set_platform_sink(backend::TraceSink* sink) noexcept {
  return g_sink.exchange(sink, std::memory_order_acq_rel);
}

void begin_session_locked(const SessionConfig& c) {
  g_capacity.store(c.capacity);
  g_log.store(c.log);
  g_session.fetch_add(1, std::memory_order_acq_rel);
  {
    // Buffers of threads that have exited and whose records are gone with the last session.
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.retain_locked([](const std::shared_ptr<ThreadBuffer>& b) { return b.use_count() > 1; });
  }
  g_flags.store(c.flags, std::memory_order_release);
}

Snapshot snapshot(std::vector<DeviceName> devices) {
  Snapshot s;
  s.pid = static_cast<int>(getpid());
  const uint64_t current = session();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& b : r.buffers) {
    std::lock_guard<SpinLock> bl(b->mu);
    if (b->session != current || (b->count == 0 && b->dropped == 0)) continue;
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
  s.devices = std::move(devices);
  return s;
}

}  // namespace mpsrt::detail::prof
