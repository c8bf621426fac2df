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
#include "core/allocator/interfaces.h"
#include "core/profiler.h"
#include "mpsrt/stream.h"

namespace mpsrt::detail {

class DeviceContext;

/// The allocator sees a stream as its AllocStream: the id, the fence value (committed_ +
/// open_pending_) and the completion event completed_, which the stream keeps here.
class StreamImpl final : public AllocStream {
 public:
  StreamImpl(DeviceContext& device, int64_t id, int priority);
  ~StreamImpl();
  StreamImpl(const StreamImpl&) = delete;
  StreamImpl& operator=(const StreamImpl&) = delete;
  /// The StreamImpl of an allocator's stream (every stream the core gives an allocator is one).
  static StreamImpl* of(AllocStream* s) noexcept { return static_cast<StreamImpl*>(s); }

  int device_index() const noexcept;
  /// True in a child process forked after the stream was made (its queue stayed behind).
  bool stale() const noexcept;

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
  /// True once the command buffer with sequence number `seq` has been committed.
  bool committed_up_to(uint64_t seq) const noexcept {
    return committed_.load(std::memory_order_acquire) >= seq;
  }
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
  /// What reaches each command buffer's sequence number once its work has completed.
  backend::TimelineEvent& completion_timeline() const noexcept { return *completed_; }
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
  int priority_;
  std::unique_ptr<backend::Queue> queue_;
  // AllocStream's completed_ reaches each command buffer's sequence number after any error of
  // it is recorded, so a waiter that wakes always sees the error: it is the queue's timeline
  // (backend::Queue::timeline: the device signals it, errors come through on_error) or, where
  // the queue keeps none, own_completed_, host-signalled from each completion callback. Its
  // committed_ is written under mu_ (read lock-free by fence_value()); its open_pending_ says
  // the open command buffer holds commands.
  std::unique_ptr<backend::TimelineEvent> own_completed_;
  std::mutex mu_;
  std::unique_ptr<backend::CommandBuffer> open_;
  std::unique_ptr<prof::Batch> profiled_;  // profiled commands of the open command buffer
  std::mutex error_mu_;
  std::string error_;
};

}  // namespace mpsrt::detail
