// What the caching allocator knows of the world (after RMM's stream_ordered_memory_resource,
// which knows a stream only as a stream/event pair and gets memory from an upstream resource):
//   AllocStream -- a stream: its id, the fence its work so far will reach, and whether its
//                  completion event has reached a fence;
//   AllocDevice -- the device the allocator's pools live on: heaps, limits, and the
//                  device-wide steps of empty_cache() and the out-of-memory ladder.
// The core's StreamImpl is an AllocStream; a DeviceContext provides an AllocDevice through
// an adaptor (AllocDeviceAdaptor, core/device.cpp). The C++ tests drive the allocator through
// fakes of both.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/backend.h"

namespace mpsrt::detail {

/// A stream as the allocator sees it. Not an abstract class: the allocator's fast paths read
/// it inline (id(), fence_value()) and reached() costs the one virtual call of the backend's
/// event, as before. The owner of the stream keeps the protected state.
class AllocStream {
 public:
  AllocStream(const AllocStream&) = delete;
  AllocStream& operator=(const AllocStream&) = delete;

  int64_t id() const noexcept { return id_; }
  /// The timeline value that work encoded so far will reach once complete (open work counts
  /// as the next commit). Cost: two atomic loads, no lock. Work encoded by other threads
  /// concurrently may or may not be covered; everything that happened before the call is.
  uint64_t fence_value() const noexcept {
    // The open-work flag first: if a commit cleared it after our own encode, the commit's
    // sequence number (stored before the flag) is then visible. The value can only come out
    // too high (a concurrent commit), which merely delays a reuse.
    const bool pending = open_pending_.load(std::memory_order_acquire);
    return committed_.load(std::memory_order_acquire) + (pending ? 1 : 0);
  }
  /// True once all work up to fence value v has completed. Cost: one atomic load.
  bool reached(uint64_t v) const { return completed_->value() >= v; }
  /// The fence value of the work committed so far (open work not included): unlike
  /// fence_value(), a value that wait_reached() may wait for without a commit.
  uint64_t committed_value() const noexcept { return committed_.load(std::memory_order_acquire); }
  /// Blocks until all work up to fence value v has completed; v must be committed
  /// (committed_value() or less). Command failures are not raised here (the owner's
  /// synchronize() reports them).
  void wait_reached(uint64_t v) const { completed_->wait(v, -1); }

 protected:
  explicit AllocStream(int64_t id) noexcept : id_(id) {}
  ~AllocStream() = default;

  const int64_t id_;
  // Sequence number of the last commit (the owner stores it before clearing open_pending_).
  std::atomic<uint64_t> committed_{0};
  std::atomic<bool> open_pending_{false};  // work is encoded and not yet committed
  // Reaches each commit's sequence number once its work has completed (the owner keeps it
  // alive as long as the stream).
  backend::TimelineEvent* completed_ = nullptr;
};

/// The device the allocator's pools live on. Called outside the allocator's lock except
/// create_heap().
class AllocDevice {
 public:
  virtual ~AllocDevice() = default;
  virtual int index() const noexcept = 0;
  virtual uint64_t recommended_max_memory() const noexcept = 0;
  virtual uint64_t max_buffer_size() const noexcept = 0;
  /// A new heap of at least nbytes, or nullptr when the device refuses (out of memory).
  virtual std::unique_ptr<backend::Heap> create_heap(size_t nbytes) = 0;
  /// Waits for every stream of the device (without consuming their errors).
  virtual void wait_idle() = 0;
  /// Commits every stream's pending work, waiting for none of it.
  virtual void flush_streams() = 0;
  /// True in a child process forked after the device was opened.
  virtual bool stale() const noexcept = 0;
};

}  // namespace mpsrt::detail
