// A stream: an in-order queue of work on one device. Encoded commands are batched into one
// open command buffer, which is committed according to a SyncType.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.h"
#include "core/profiler.h"
#include "mpsrt/stream.h"

namespace mpsrt::detail {

class DeviceContext;

class StreamImpl {
 public:
  StreamImpl(DeviceContext& device, int64_t id, int priority);
  ~StreamImpl();
  StreamImpl(const StreamImpl&) = delete;
  StreamImpl& operator=(const StreamImpl&) = delete;

  int device_index() const noexcept;
  /// True in a child process forked after the stream was made (its queue stayed behind).
  bool stale() const noexcept;
  int64_t id() const noexcept { return id_; }

  /// Encodes the command `op` into the open command buffer (opening one if needed) under the
  /// stream's lock, then applies `sync`. f receives a backend::CommandBuffer&.
  /// Cost with the profiler off: one relaxed load more than the encode itself.
  template <class F>
  void encode(const prof::OpDesc& op, F&& f, SyncType sync = SyncType::None) {
    if (MPSRT_UNLIKELY(prof::flags() != 0)) {
      encode_profiled(
          op, [&](backend::CommandBuffer& cb) { f(cb); }, sync);
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!open_) open_ = queue_->create_command_buffer();
    f(*open_);
    if (open_->size() > 0) open_pending_.store(true, std::memory_order_release);
    apply_locked(sync, lock);
  }

  /// When the stream is idle -- nothing encoded in the open command buffer and every committed
  /// command buffer completed -- runs f() under the stream's lock (no command can be encoded
  /// meanwhile) and returns true; otherwise returns false without running it.
  template <class F>
  bool if_idle(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    if ((open_ && open_->size() > 0) || !reached(committed_.load(std::memory_order_relaxed))) {
      return false;
    }
    f();
    return true;
  }

  void commit(SyncType sync);
  /// Encodes fn to run on a runtime thread after the stream's work so far, and commits.
  void add_callback(std::function<void()> fn) {
    encode(
        {prof::Op::Callback}, [&](backend::CommandBuffer& cb) { cb.host_callback(std::move(fn)); },
        SyncType::Commit);
  }
  int priority() const noexcept { return priority_; }
  /// Command buffers a stream may have committed and not completed before commit() waits.
  static constexpr uint64_t kMaxInFlight = 64;
  /// The timeline value that work encoded so far will reach once complete (the open command
  /// buffer counts as the next commit).
  /// Cost: two atomic loads, no lock. Work encoded by other threads concurrently may or may not
  /// be covered; everything that happened before the call is.
  uint64_t fence_value() const noexcept {
    // The open-buffer flag first: if a commit cleared it after our own encode, the commit's
    // sequence number (stored before the flag) is then visible. The value can only come out
    // too high (a concurrent commit), which merely delays a reuse.
    const bool pending = open_pending_.load(std::memory_order_acquire);
    return committed_.load(std::memory_order_acquire) + (pending ? 1 : 0);
  }
  /// True once the command buffer with sequence number `seq` has been committed.
  bool committed_up_to(uint64_t seq) const noexcept {
    return committed_.load(std::memory_order_acquire) >= seq;
  }
  /// True once every command buffer up to fence value v has completed. Cost: one atomic load.
  bool reached(uint64_t v) const { return completed_->value() >= v; }
  /// Waits for all work without consuming a recorded command failure (allocator, teardown).
  void wait_idle();
  /// Commits what is open and waits for everything committed; rethrows a command failure.
  /// When nothing else is in flight the backend may run the open work on the calling thread.
  void synchronize();
  /// True when the open command buffer holds commands (a hint: other threads may encode).
  bool has_open_work() const noexcept { return open_pending_.load(std::memory_order_acquire); }
  /// Commits the open command buffer if it holds commands (never runs it inline).
  void flush() {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ && open_->size() > 0) commit_locked();
  }
  /// True when every command encoded so far has completed. Commits the open command buffer
  /// (without waiting for the stream's lock), so that polling query() makes progress.
  bool query();

 private:
  // The encode of a profiled session: timestamps around the command, the encode signpost.
  void encode_profiled(const prof::OpDesc& op,
                       const std::function<void(backend::CommandBuffer&)>& f, SyncType sync);
  // What runs when the command buffer with sequence number seq completes (it takes the
  // profiled commands of the open command buffer along).
  backend::CompletionFn completion(uint64_t seq);
  // Commits the open command buffer (an empty one when none is open); `done` (when given)
  // must come from completion() for the sequence number the commit takes.
  uint64_t commit_locked(backend::CompletionFn done = nullptr);
  void apply_locked(SyncType sync, std::unique_lock<std::mutex>& lock);
  void wait_for(uint64_t seq);
  void record_error(const std::string& what);
  void rethrow_error();

  DeviceContext& device_;
  int64_t id_;
  int priority_;
  std::unique_ptr<backend::Queue> queue_;
  // Host-signalled from each completion callback with the command buffer's sequence number,
  // after any error is recorded: a waiter that wakes always sees the error.
  std::unique_ptr<backend::TimelineEvent> completed_;
  std::mutex mu_;
  std::unique_ptr<backend::CommandBuffer> open_;
  // Sequence number of the last commit (written under mu_, read lock-free by fence_value).
  std::atomic<uint64_t> committed_{0};
  std::atomic<bool> open_pending_{false};  // the open command buffer holds commands
  std::unique_ptr<prof::Batch> profiled_;  // profiled commands of the open command buffer
  std::mutex error_mu_;
  std::string error_;
};

}  // namespace mpsrt::detail
