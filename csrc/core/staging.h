// Staging: the core's path for host <-> device copies of memory the host cannot address (the
// discrete memory model, backend::DeviceInfo::unified_memory false). One pool per device.
//
// The pool holds at most `pool_bytes` (MPSRT_STAGING_BYTES, 64 MiB by default) of host-visible
// memory from the backend (Device::create_staging_heap), in chunks of at most 8 MiB (a quarter
// of the pool when that is smaller, so that every pool has at least 4 chunks). A copy borrows
// up to half of the chunks (2 to 8), so that two copies from two threads both pipeline:
//   host -> device: the host copies piece i + 1 into a chunk while the device copies piece i
//                   out of another (one committed command buffer per piece);
//   device -> host: the device copies as many pieces ahead as the copy holds chunks, and the
//                   host copies each out as soon as its piece is done, then reissues the chunk.
// Chunks are stream-ordered: each remembers the stream and fence value of the last copy that
// used it, and is reused (by its copy or, once returned, by another) only when that stream has
// reached the fence -- the streams' own completion events, no thread of its own. A copy larger
// than the pool goes through it in pieces; a copy that finds every chunk borrowed waits for one
// to come back (it never fails for want of staging memory, unless the backend gives none at
// all). Idle chunks stay for the next copy; empty_cache() releases them.
//
// Why 8 MiB chunks: large enough that a command buffer per piece (tens of microseconds to
// submit and complete on a GPU) is a few percent of the piece's PCIe time (8 MiB at 25 GB/s is
// about 330 us), small enough that the first piece's host copy (before the device starts)
// stays short and that 64 MiB -- a bounded amount of host memory, pinned on most drivers --
// keeps 4 pieces in flight for each of two copies.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/backend.h"

namespace mpsrt::detail {

class StreamImpl;
class AllocStream;

class StagingPool {
 public:
  static constexpr size_t kMaxChunk = size_t(8) << 20;
  /// What memory_stats() reports ("staging_bytes.current", "staging_bytes.peak",
  /// "num_staged_copies").
  struct Stats {
    int64_t bytes_current = 0;
    int64_t bytes_peak = 0;
    int64_t copies = 0;
  };

  /// `device_index` names the device in messages.
  StagingPool(backend::Device& device, int device_index, uint64_t pool_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  /// Copies nbytes from host memory at src into device memory at dst, on `stream` (after its
  /// queued work), and returns once the device has written them. Throws mpsrt::OutOfMemory when
  /// the backend gives no staging memory at all, mpsrt::Error when a copy command fails.
  void to_device(const void* src, backend::BufferRef dst, size_t nbytes, StreamImpl& stream);
  /// Copies nbytes from device memory at src into host memory at dst, on `stream` (after its
  /// queued work), and returns once they are all in dst. Throws as to_device().
  void to_host(backend::BufferRef src, void* dst, size_t nbytes, StreamImpl& stream);

  /// Returns the chunks no copy holds to the backend (their last use must be complete: they
  /// are waited for). Returns the bytes released.
  size_t release_idle();

  Stats stats() const;
  void reset_peak();
  void reset_accumulated();
  size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  size_t max_chunks() const noexcept { return max_chunks_; }

 private:
  struct Chunk {
    std::unique_ptr<backend::Heap> heap;
    AllocStream* stream = nullptr;  // the last stream that used it ...
    uint64_t fence = 0;             // ... and the fence value its use there reaches
    bool lent = false;              // borrowed by a copy
  };
  class Lease;

  // A chunk lent to the caller, whose last use is complete. `block`: wait for one when every
  // chunk is lent (else return nullptr).
  Chunk* acquire(bool block);
  void give_back(const std::vector<Chunk*>& chunks) noexcept;
  [[noreturn]] void refuse() const;

  backend::Device& device_;
  const int index_;
  const size_t chunk_bytes_;
  const size_t max_chunks_;
  const size_t per_copy_;  // chunks one copy may hold
  mutable std::mutex mu_;
  std::condition_variable returned_;  // a chunk was given back or a creation ended
  std::vector<std::unique_ptr<Chunk>> chunks_;
  size_t creating_ = 0;   // chunks being created outside the lock
  bool refused_ = false;  // the backend refused a chunk: use those there are
  Stats stats_;
};

}  // namespace mpsrt::detail
