// Streams: in-order queues of work on one device. StreamImpl is one stream: encoded commands
// are batched into one open command buffer, which is committed according to a SyncType.
// DeviceStreams is a device's set of them: the default stream, the pool, and each thread's
// current stream. The public API (mpsrt/stream.h) is in stream_api.cpp.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/allocator/interfaces.h"
#include "core/profiler.h"
#include "mpsrt/stream.h"

namespace mpsrt::detail {

class DeviceContext;

/// Whether every stream of the process is idle, known without a lock or a call into a device:
/// what a host operation on device memory asks first (host_op_enter), so that one on idle
/// streams costs a few loads. A stream bumps the process's activity count after each change
/// that may take it out of idle (the first command of an open command buffer, a commit, a
/// recorded failure), as do a runtime reset and a fork. note() records the count read before
/// a caller found every stream of every open device idle; while the count still equals it,
/// nothing has been queued, committed or failed anywhere since (a stream that leaves idle
/// bumps after its change, so a caller that read the new count sees the change).
class Quiet {
 public:
  static void bump() noexcept { activity_.fetch_add(1, std::memory_order_seq_cst); }
  /// True while every stream is known idle and `device` is a device index of the runtime that
  /// was checked (0 <= device < its device count).
  static bool holds(int device) noexcept {
    return device >= 0 && device < devices_.load(std::memory_order_acquire) &&
           at_.load(std::memory_order_acquire) == activity_.load(std::memory_order_seq_cst);
  }
  /// Records the quiet state when every stream of the running runtime is idle (core/runtime.cpp).
  static void note() noexcept;

 private:
  static inline std::atomic<uint64_t> activity_{1};
  static inline std::atomic<uint64_t> at_{0};  // the activity found quiet (0: never)
  static inline std::atomic<int> devices_{0};  // the device count of the runtime checked
};

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
    if (open_->size() > 0) mark_pending();
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
  /// True when nothing is encoded in the open command buffer, every committed command buffer
  /// has completed and no failure waits to be reported. Cost: a few atomic loads.
  bool idle() const {
    return !open_pending_.load(std::memory_order_acquire) &&
           reached(committed_.load(std::memory_order_acquire)) &&
           !failed_.load(std::memory_order_acquire);
  }
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
  // The open command buffer holds commands (under mu_): the first one takes the stream out of
  // idle (Quiet).
  void mark_pending() noexcept {
    if (open_pending_.load(std::memory_order_relaxed)) return;
    open_pending_.store(true, std::memory_order_release);
    Quiet::bump();
  }
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
  std::atomic<bool> failed_{false};  // error_ holds a failure (read without error_mu_)
};

/// The streams of one device: the default stream (id 0), a pool of kPoolStreamsPerPriority
/// streams per priority class, and each thread's current stream. Every stream lives as long
/// as the device.
class DeviceStreams {
 public:
  static constexpr int kPoolStreamsPerPriority = 8;
  static constexpr int kPriorityClasses = 3;

  explicit DeviceStreams(DeviceContext& device);
  /// Destroys the pool streams, then the default stream (each waits for its work first).
  ~DeviceStreams();
  DeviceStreams(const DeviceStreams&) = delete;
  DeviceStreams& operator=(const DeviceStreams&) = delete;

  StreamImpl& default_stream() noexcept { return *default_; }
  /// A stream from the pool, round-robin within its priority class (as torch.cuda): priority
  /// < 0 high, 0 normal, > 0 low. Pool streams are created on first use.
  StreamImpl& pool_stream(int priority);
  /// The calling thread's current stream on this device (the default stream until set).
  /// Cost: a thread-local read and a compare.
  StreamImpl& current() noexcept;
  /// Makes s the calling thread's current stream on this device; returns the previous one.
  StreamImpl& set_current(StreamImpl& s) noexcept;
  /// Every stream created so far, the default stream first.
  std::vector<StreamImpl*> all();
  /// Commits every stream's open work but one, then waits for all of them; rethrows the first
  /// stream error once every stream has been waited for.
  void synchronize();
  /// Waits for every stream without consuming errors.
  void wait_idle();
  /// Commits every stream's open work, waiting for none of it.
  void flush();

 private:
  DeviceContext& device_;
  const int index_;  // the device's index: its entry in each thread's current-stream table
  // Tells this device's entries of the threads' current-stream tables from those of a device
  // of an earlier runtime at the same index (unique per DeviceStreams in the process).
  const uint64_t generation_;
  std::unique_ptr<StreamImpl> default_;
  std::mutex mu_;
  std::array<std::array<std::unique_ptr<StreamImpl>, kPoolStreamsPerPriority>, kPriorityClasses>
      pool_;  // guarded by mu_
  std::array<std::atomic<uint32_t>, kPriorityClasses> pool_next_{};
  int64_t next_id_ = 1;           // guarded by mu_
  std::vector<StreamImpl*> all_;  // guarded by mu_
};

}  // namespace mpsrt::detail
