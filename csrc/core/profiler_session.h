// The profiler's session and its per-thread record buffers: the state that the recorder, the
// allocator trace, the ranges, the API and the fork handlers share. Nothing here knows the
// runtime: what a session takes from it (its options, the devices' names) is passed in.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/profiler.h"
#include "core/profiler_records.h"
#include "core/spin_lock.h"

namespace mpsrt::detail::prof {

constexpr size_t kChunk = 4096;  // records per allocation of a thread's buffer

extern std::atomic<uint64_t> g_session;          // bumped by every begin_session_locked()
extern std::atomic<uint64_t> g_capacity;         // records per thread (MPSRT_PROFILE_RECORDS)
extern std::atomic<uint32_t> g_log;              // MPSRT_LOG_PROFILE_INFO of the session
extern std::atomic<backend::TraceSink*> g_sink;  // set_platform_sink(); never destroyed here

/// The current session's number. Cost: one acquire load.
inline uint64_t session() noexcept {
  return g_session.load(std::memory_order_acquire);
}
/// The session's MPSRT_LOG_PROFILE_INFO bits. Cost: one relaxed load.
inline uint32_t log_bits() noexcept {
  return g_log.load(std::memory_order_relaxed);
}
/// The installed platform sink or nullptr. Cost: one acquire load.
inline backend::TraceSink* platform_sink() noexcept {
  return g_sink.load(std::memory_order_acquire);
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
  int tid = 0;
  std::string name;

  ThreadBuffer();  // the calling thread's id and name
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

/// Every thread's buffer, for the snapshot. A buffer leaves with the session after its thread
/// has exited.
struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  /// Keeps the buffers `keep` is true for (mu held).
  template <class F>
  void retain_locked(F&& keep) {
    std::vector<std::shared_ptr<ThreadBuffer>> kept;
    for (auto& b : buffers) {
      if (keep(b)) kept.push_back(std::move(b));
    }
    buffers.swap(kept);
  }
};
Registry& registry();  // never destroyed: threads may record during exit

inline thread_local ThreadBuffer* tls_buffer = nullptr;  // the calling thread's, once it has one

/// The calling thread's buffer, registered on first use.
inline ThreadBuffer& local_buffer() {
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

inline void push(const Record& r) {
  with_buffer([&](ThreadBuffer& t) { t.push_locked(r); });
}

/// Held while a session starts or stops, exports or reports.
std::mutex& session_mutex();

/// What a session records and how: filled from the runtime's options by the API.
struct SessionConfig {
  uint32_t flags = 0;     // Flags
  uint64_t capacity = 0;  // records per thread
  uint32_t log = 0;       // MPSRT_LOG_PROFILE_INFO bits
};
/// Starts a new session (session_mutex() held): the records of the last one are dropped as
/// each thread records again, and the buffers of exited threads leave the registry.
void begin_session_locked(const SessionConfig& c);

/// A copy of the current session's records; `devices` names the devices' tracks.
Snapshot snapshot(std::vector<DeviceName> devices);

}  // namespace mpsrt::detail::prof
