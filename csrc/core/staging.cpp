#include "core/staging.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>

#include "core/profiler.h"
#include "core/stream.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

namespace {
constexpr size_t kPage = 4096;

// A quarter of the pool, at most kMaxChunk, in whole pages.
size_t chunk_size(uint64_t pool_bytes) {
  const uint64_t quarter = pool_bytes / 4 / kPage * kPage;
  return static_cast<size_t>(
      std::max<uint64_t>(std::min<uint64_t>(quarter, StagingPool::kMaxChunk), kPage));
}
}  // namespace

// The chunks one copy holds: borrowed as it needs them (up to per_copy_), given back when it
// ends, whichever way it ends (a chunk whose last piece is still in flight keeps its fence, so
// nobody reuses it before the device is done with it).
class StagingPool::Lease {
 public:
  explicit Lease(StagingPool& pool) : pool_(pool) {}
  ~Lease() { pool_.give_back(held_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // The chunk for the next piece, free for the host to write: a further one while the copy may
  // hold more and one is free now (the first one is waited for), else the copy's own least
  // recently used one once the device is done with it.
  Chunk* next() {
    if (held_.size() < pool_.per_copy_) {
      if (Chunk* c = pool_.acquire(held_.empty())) {
        held_.push_back(c);
        return c;
      }
    }
    Chunk* c = held_[ring_++ % held_.size()];
    if (c->stream != nullptr) c->stream->wait_reached(c->fence);
    return c;
  }
  // A further chunk when one is free now and the copy may hold more; else nullptr.
  Chunk* grow() {
    if (held_.empty()) return next();
    if (held_.size() >= pool_.per_copy_) return nullptr;
    Chunk* c = pool_.acquire(false);
    if (c != nullptr) held_.push_back(c);
    return c;
  }

 private:
  StagingPool& pool_;
  std::vector<Chunk*> held_;
  size_t ring_ = 0;
};

StagingPool::StagingPool(backend::Device& device, int device_index, uint64_t pool_bytes)
    : device_(device),
      index_(device_index),
      chunk_bytes_(chunk_size(pool_bytes)),
      max_chunks_(std::max<size_t>(static_cast<size_t>(pool_bytes / chunk_size(pool_bytes)), 1)),
      // Half the chunks, 2 to 8 (64 MiB in flight is deep enough a pipeline for any link).
      per_copy_(std::min(max_chunks_, std::clamp<size_t>(max_chunks_ / 2, 2, 8))) {}

StagingPool::~StagingPool() = default;  // the device is idle: no chunk is in use

void StagingPool::refuse() const {
  throw_oom("[staging] device " + std::to_string(index_) + " (" + device_.info().name +
            ") gave no host-visible staging memory (a chunk of " + std::to_string(chunk_bytes_) +
            " bytes) for a host copy of device memory; free host memory, or lower "
            "MPSRT_STAGING_BYTES");
}

StagingPool::Chunk* StagingPool::acquire(bool block) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // An idle chunk whose last use is complete; else remember one to wait for.
    Chunk* busy = nullptr;
    for (const auto& c : chunks_) {
      if (c->lent) continue;
      if (c->stream == nullptr || c->stream->reached(c->fence)) {
        c->lent = true;
        return c.get();
      }
      if (busy == nullptr) busy = c.get();
    }
    // A new chunk while the pool is below its bound (after a refusal: only when it has none).
    if (chunks_.size() + creating_ < max_chunks_ && (!refused_ || chunks_.empty())) {
      ++creating_;
      lock.unlock();
      std::unique_ptr<backend::Heap> heap;
      try {
        heap = device_.create_staging_heap(chunk_bytes_);
      } catch (...) {
        lock.lock();
        --creating_;
        returned_.notify_all();
        throw;
      }
      lock.lock();
      --creating_;
      returned_.notify_all();
      if (heap != nullptr && heap->host_ptr() != nullptr) {
        auto c = std::make_unique<Chunk>();
        c->heap = std::move(heap);
        c->lent = true;
        chunks_.push_back(std::move(c));
        stats_.bytes_current += static_cast<int64_t>(chunk_bytes_);
        stats_.bytes_peak = std::max(stats_.bytes_peak, stats_.bytes_current);
        return chunks_.back().get();
      }
      refused_ = true;
      if (chunks_.empty() && creating_ == 0) refuse();
      continue;
    }
    // An idle chunk still in use by the device: borrow it and wait for its fence.
    if (busy != nullptr) {
      busy->lent = true;
      AllocStream* s = busy->stream;
      const uint64_t fence = busy->fence;
      lock.unlock();
      s->wait_reached(fence);
      return busy;
    }
    if (!block) return nullptr;
    returned_.wait(lock);  // every chunk is borrowed: wait for one to come back
  }
}

void StagingPool::give_back(const std::vector<Chunk*>& chunks) noexcept {
  if (chunks.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Chunk* c : chunks) c->lent = false;
  }
  returned_.notify_all();
}

void StagingPool::to_device(const void* src, backend::BufferRef dst, size_t nbytes,
                            StreamImpl& stream) {
  if (nbytes == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.copies;
  }
  const auto* from = static_cast<const uint8_t*>(src);
  const uint64_t address = dst.heap->address() + dst.offset;
  {
    Lease lease(*this);
    for (size_t done = 0; done < nbytes;) {
      const size_t piece = std::min(chunk_bytes_, nbytes - done);
      Chunk* c = lease.next();
      // The host fills this chunk while the device copies the previous pieces out of others.
      std::memcpy(c->heap->host_ptr(), from + done, piece);
      const backend::BufferRef from_chunk{c->heap.get(), 0};
      const backend::BufferRef to{dst.heap, dst.offset + done};
      stream.encode(
          {prof::Op::CopyFromHost, piece, address + done},
          [&](backend::CommandBuffer& cb) { cb.copy(from_chunk, to, piece); }, SyncType::Commit);
      c->stream = &stream;
      c->fence = stream.committed_value();
      done += piece;
    }
  }
  stream.synchronize();  // the last pieces; raises a failed copy
}

void StagingPool::to_host(backend::BufferRef src, void* dst, size_t nbytes, StreamImpl& stream) {
  if (nbytes == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.copies;
  }
  auto* to = static_cast<uint8_t*>(dst);
  const uint64_t address = src.heap->address() + src.offset;
  struct Piece {
    Chunk* chunk;
    size_t at;
    size_t len;
  };
  {
    Lease lease(*this);
    std::deque<Piece> flight;  // issued, in order
    size_t issued = 0;
    auto issue = [&](Chunk* c) {
      const size_t len = std::min(chunk_bytes_, nbytes - issued);
      const backend::BufferRef from{src.heap, src.offset + issued};
      const backend::BufferRef into_chunk{c->heap.get(), 0};
      stream.encode(
          {prof::Op::CopyToHost, len, address + issued},
          [&](backend::CommandBuffer& cb) { cb.copy(from, into_chunk, len); }, SyncType::Commit);
      c->stream = &stream;
      c->fence = stream.committed_value();
      flight.push_back({c, issued, len});
      issued += len;
    };
    // The device copies as many pieces ahead as the copy holds chunks ...
    issue(lease.next());
    while (issued < nbytes) {
      Chunk* c = lease.grow();
      if (c == nullptr) break;
      issue(c);
    }
    // ... and each chunk is reissued as soon as the host has copied its piece out.
    while (!flight.empty()) {
      const Piece p = flight.front();
      flight.pop_front();
      p.chunk->stream->wait_reached(p.chunk->fence);
      std::memcpy(to + p.at, p.chunk->heap->host_ptr(), p.len);
      if (issued < nbytes) issue(p.chunk);
    }
  }
  stream.synchronize();  // raises a failed copy (the bytes in dst are then not to be used)
}

size_t StagingPool::release_idle() {
  std::vector<std::unique_ptr<Chunk>> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = chunks_.begin(); it != chunks_.end();) {
      if ((*it)->lent) {
        ++it;
      } else {
        idle.push_back(std::move(*it));
        it = chunks_.erase(it);
      }
    }
    stats_.bytes_current -= static_cast<int64_t>(idle.size() * chunk_bytes_);
    refused_ = false;
  }
  for (const auto& c : idle) {
    if (c->stream != nullptr) c->stream->wait_reached(c->fence);
  }
  return idle.size() * chunk_bytes_;  // the heaps go back to the backend here
}

StagingPool::Stats StagingPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void StagingPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_peak = stats_.bytes_current;
}

void StagingPool::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.copies = 0;
}

}  // namespace mpsrt::detail
