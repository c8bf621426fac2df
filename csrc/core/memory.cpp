// The public memory API (mpsrt/allocator.h) over the per-device caching allocators.
#include <cstring>

#include <algorithm>
#include <vector>

#include "core/access.h"
#include "core/allocator/caching_allocator.h"
#include "core/allocator/history.h"
#include "core/allocator/stats.h"
#include "core/format.h"
#include "core/runtime.h"
#include "core/staging.h"
#include "core/stream.h"
#include "mpsrt/allocator.h"
#include "mpsrt/error.h"

namespace mpsrt {

namespace detail {
// How many Buffers hold one allocation, once it has been shared by a view.
struct BufferShare {
  std::atomic<size_t> refs{1};
};
}  // namespace detail

using detail::Block;
using detail::DeviceContext;
using detail::Runtime;

namespace {
DeviceContext& device_of(const Stream& s) {
  return Runtime::get().device(s.device());
}

}  // namespace

Buffer::Buffer(size_t nbytes, const Stream& stream) {
  stream.check_owner();
  if (nbytes == 0) return;
  DeviceContext& d = device_of(stream);
  alloc_ = &d.allocator();
  block_ = alloc_->allocate(nbytes, *detail::Access::impl(stream));
  nbytes_ = nbytes;
}

Buffer::Buffer(size_t nbytes) : Buffer(nbytes, default_stream()) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    block_ = o.block_;
    alloc_ = o.alloc_;
    share_.store(o.share_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    offset_ = o.offset_;
    nbytes_ = o.nbytes_;
    o.block_ = nullptr;
    o.alloc_ = nullptr;
    o.share_.store(nullptr, std::memory_order_relaxed);
    o.offset_ = o.nbytes_ = 0;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (block_ != nullptr) {
    // Never shared: no atomic at all (the common case). Shared: the last holder frees.
    detail::BufferShare* s = share_.load(std::memory_order_acquire);
    if (s == nullptr || s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      delete s;
      if (MPSRT_LIKELY(!alloc_->stale())) alloc_->free(block_);
    }
    block_ = nullptr;
    alloc_ = nullptr;
    share_.store(nullptr, std::memory_order_relaxed);
    offset_ = nbytes_ = 0;
  }
}

Buffer Buffer::view(size_t offset, size_t nbytes) const {
  if (MPSRT_UNLIKELY(offset > nbytes_ || nbytes > nbytes_ - offset)) {
    detail::throw_invalid("[buffer] view: bytes [" + std::to_string(offset) + ", " +
                          std::to_string(offset) + " + " + std::to_string(nbytes) +
                          ") are outside the buffer's " + std::to_string(nbytes_) +
                          " bytes; a view must lie within [0, " + std::to_string(nbytes_) + ")");
  }
  Buffer v;
  if (block_ == nullptr) return v;
  check_owner();
  detail::BufferShare* s = share_.load(std::memory_order_acquire);
  if (s == nullptr) {
    auto* fresh = new detail::BufferShare;  // refs = 1: this Buffer
    if (share_.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) {
      s = fresh;
    } else {
      delete fresh;  // another thread shared it first; s is its count
    }
  }
  s->refs.fetch_add(1, std::memory_order_relaxed);
  v.block_ = block_;
  v.alloc_ = alloc_;
  v.share_.store(s, std::memory_order_relaxed);
  v.offset_ = offset_ + offset;
  v.nbytes_ = nbytes;
  return v;
}

bool Buffer::shared() const noexcept {
  const detail::BufferShare* s = share_.load(std::memory_order_acquire);
  return s != nullptr && s->refs.load(std::memory_order_acquire) > 1;
}

void Buffer::check_owner() const {
  if (MPSRT_UNLIKELY(block_ != nullptr && alloc_->stale())) detail::throw_forked("Buffer");
}

int Buffer::device() const noexcept {
  return block_ ? detail::StreamImpl::of(block_->stream)->device_index() : -1;
}
Stream Buffer::stream() const noexcept {
  return detail::Access::make_stream(block_ ? detail::StreamImpl::of(block_->stream) : nullptr);
}
uint64_t Buffer::address() const noexcept {
  return block_ ? block_->address() + offset_ : 0;
}

void* Buffer::host_ptr() const noexcept {
  if (block_ == nullptr) return nullptr;
  auto* base = static_cast<uint8_t*>(block_->heap->heap->host_ptr());
  return base ? base + block_->offset + offset_ : nullptr;
}

void Buffer::record_stream(const Stream& stream) {
  if (block_ == nullptr) return;
  check_owner();
  stream.check_owner();
  if (stream.device() != device()) {
    detail::throw_invalid("[allocator] record_stream: the stream is on device " +
                          std::to_string(stream.device()) + " but the buffer on device " +
                          std::to_string(device()) + "; use a stream of the buffer's device");
  }
  alloc_->record_stream(block_, *detail::Access::impl(stream));
}

void Buffer::fill(uint64_t pattern, unsigned pattern_size, const Stream& stream) {
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) {
    detail::throw_invalid("[buffer] fill: pattern size must be 1, 2, 4 or 8 bytes, got " +
                          std::to_string(pattern_size));
  }
  stream.check_owner();
  if (block_ == nullptr) return;
  check_owner();
  if (stream.device() != device()) {
    detail::throw_invalid("[buffer] fill: the stream is on device " +
                          std::to_string(stream.device()) + " but the buffer on device " +
                          std::to_string(device()) + "; use a stream of the buffer's device");
  }
  // A command on another stream makes that stream a user of the memory (cross-stream safety).
  detail::StreamImpl* const s = detail::Access::impl(stream);
  if (s != block_->stream) record_stream(stream);
  const size_t n = nbytes_ / pattern_size * pattern_size;
  if (n == 0) return;
  backend::BufferRef ref{block_->heap->heap.get(), block_->offset + offset_};
  s->encode({detail::prof::Op::Fill, n, address()},
            [&](backend::CommandBuffer& cb) { cb.fill(ref, n, pattern, pattern_size); });
}

void Buffer::copy_from(const Buffer& src, const Stream& stream) {
  stream.check_owner();
  if (src.nbytes() != nbytes()) {
    detail::throw_invalid("[buffer] copy_: the source has " + std::to_string(src.nbytes()) +
                          " bytes but the destination " + std::to_string(nbytes()) +
                          "; sizes must match");
  }
  if (block_ == nullptr || nbytes_ == 0) return;
  check_owner();
  src.check_owner();
  if (MPSRT_UNLIKELY(src.device() != device() || stream.device() != device())) {
    if (stream.device() != device()) {
      detail::throw_invalid("[buffer] copy_: the stream is on device " +
                            std::to_string(stream.device()) + " but the destination buffer on " +
                            "device " + std::to_string(device()) +
                            "; use a stream of the destination's device");
    }
    copy_from_peer(src, stream);
    return;
  }
  detail::StreamImpl* const on = detail::Access::impl(stream);
  if (on != block_->stream) record_stream(stream);
  if (on != src.block_->stream) src.alloc_->record_stream(src.block_, *on);
  backend::BufferRef d{block_->heap->heap.get(), block_->offset + offset_};
  backend::BufferRef s{src.block_->heap->heap.get(), src.block_->offset + src.offset_};
  const size_t n = nbytes();
  on->encode({detail::prof::Op::Copy, n, address()},
             [&](backend::CommandBuffer& cb) { cb.copy(s, d, n); });
}

namespace {
// Discrete memory: bytes [at, at + n) of `b` from host memory `from` (when set) or into host
// memory `to`, through the staging pool of b's device on stream s (which then uses the memory:
// recorded, as any command on another stream is). Complete when it returns.
void stage_range(const Buffer& b, detail::StreamImpl& s, size_t at, size_t n, const void* from,
                 void* to) {
  Block* const block = detail::Access::block(b);
  DeviceContext& d = Runtime::get().device(b.device());
  if (&s != block->stream) d.allocator().record_stream(block, s);
  const backend::BufferRef ref{block->heap->heap.get(), block->offset + b.offset() + at};
  if (from != nullptr) {
    d.staging().to_device(from, ref, n, s);
  } else {
    d.staging().to_host(ref, to, n, s);
  }
}
}  // namespace

// A source on another device. No backend orders one device's queue after another's, so the
// host does: it waits for the source device's current stream and for `stream` (the two streams
// a cross-device copy_ on CUDA orders itself after), then moves the bytes -- directly between
// host-visible memory, else staged on those two streams -- and returns with the copy done, so
// that later work on either stream sees it. The bytes cross the host once where either side is
// host-visible, and through a bounded host piece (kPiece at a time) where both are discrete.
void Buffer::copy_from_peer(const Buffer& src, const Stream& stream) {
  detail::StreamImpl& from = Runtime::get().device(src.device()).streams().current();
  detail::StreamImpl& to = *detail::Access::impl(stream);
  from.synchronize();
  to.synchronize();
  const bool traced = detail::prof::flags() != 0;
  const int64_t begin = traced ? detail::prof::now_ns() : 0;
  const size_t n = nbytes_;
  void* const dst_host = host_ptr();
  const void* const src_host = src.host_ptr();
  if (dst_host != nullptr && src_host != nullptr) {
    std::memcpy(dst_host, src_host, n);  // two allocations of two devices: never overlapping
  } else if (src_host != nullptr) {
    stage_range(*this, to, 0, n, src_host, nullptr);
  } else if (dst_host != nullptr) {
    stage_range(src, from, 0, n, nullptr, dst_host);
  } else {
    constexpr size_t kPiece = size_t(8) << 20;
    std::vector<uint8_t> piece(std::min(n, kPiece));
    for (size_t at = 0; at < n; at += piece.size()) {
      const size_t len = std::min(piece.size(), n - at);
      stage_range(src, from, at, len, nullptr, piece.data());
      stage_range(*this, to, at, len, piece.data(), nullptr);
    }
  }
  if (traced) {
    detail::prof::record_host_copy(detail::prof::Op::CopyPeer, device(), n, begin,
                                   detail::prof::now_ns());
  }
}

void Buffer::copy_from_host(const void* src, size_t n) {
  if (n != nbytes()) {
    detail::throw_invalid("[buffer] copy_from_host: the source has " + std::to_string(n) +
                          " bytes but the buffer " + std::to_string(nbytes()) +
                          "; sizes must match");
  }
  if (block_ == nullptr || n == 0) return;
  check_owner();
  if (src == nullptr) {
    detail::throw_invalid("[buffer] copy_from_host: the source is a null pointer for " +
                          std::to_string(n) + " bytes");
  }
  synchronize(device());  // the device's pending work may still read or write the buffer
  const bool traced = detail::prof::flags() != 0;
  const int64_t begin = traced ? detail::prof::now_ns() : 0;
  if (void* dst = host_ptr()) {
    std::memmove(dst, src, n);  // the source may be a host view of this very buffer
  } else {
    stage(src, nullptr);
  }
  if (traced) {
    detail::prof::record_host_copy(detail::prof::Op::CopyFromHost, device(), n, begin,
                                   detail::prof::now_ns());
  }
}

void Buffer::copy_to_host(void* dst, size_t n) const {
  if (n != nbytes()) {
    detail::throw_invalid("[buffer] copy_to_host: the destination has " + std::to_string(n) +
                          " bytes but the buffer " + std::to_string(nbytes()) +
                          "; sizes must match");
  }
  if (block_ == nullptr || n == 0) return;
  check_owner();
  if (dst == nullptr) {
    detail::throw_invalid("[buffer] copy_to_host: the destination is a null pointer for " +
                          std::to_string(n) + " bytes");
  }
  synchronize(device());  // the device's pending work may still write the buffer
  const bool traced = detail::prof::flags() != 0;
  const int64_t begin = traced ? detail::prof::now_ns() : 0;
  if (const void* src = host_ptr()) {
    std::memmove(dst, src, n);  // the destination may be a host view of this very buffer
  } else {
    stage(nullptr, dst);
  }
  if (traced) {
    detail::prof::record_host_copy(detail::prof::Op::CopyToHost, device(), n, begin,
                                   detail::prof::now_ns());
  }
}

// Discrete memory: the bytes pass through the device's staging pool, on the calling thread's
// current stream of the buffer's device (which then uses the memory: recorded, as any command
// on another stream is).
void Buffer::stage(const void* from, void* to) const {
  DeviceContext& d = Runtime::get().device(device());
  detail::StreamImpl& s = d.streams().current();
  if (&s != block_->stream) alloc_->record_stream(block_, s);
  const backend::BufferRef ref{block_->heap->heap.get(), block_->offset + offset_};
  if (from != nullptr) {
    d.staging().to_device(from, ref, nbytes_, s);
  } else {
    d.staging().to_host(ref, to, nbytes_, s);
  }
}

std::map<std::string, int64_t> memory_stats(int device) {
  DeviceContext& d = Runtime::get().device(device);
  std::map<std::string, int64_t> out;
  d.allocator().locked([&](const std::set<detail::HeapRec*>& heaps) {
    detail::StatArray split_bytes{}, split{};
    for (const detail::HeapRec* h : heaps) {
      if (h->allocated == 0) continue;
      const size_t k = h->pool == detail::Pool::Small ? 1 : 2;
      for (const Block* b = h->first; b != nullptr; b = b->next) {
        if (b->allocated) continue;
        for (size_t i : {size_t(0), k}) {
          split_bytes[i].current += static_cast<int64_t>(b->size);
          split[i].current += 1;
        }
      }
    }
    out = d.stats().to_map(split_bytes, split);
  });
  const detail::StagingPool::Stats st = d.staging().stats();
  out["staging_bytes.current"] = st.bytes_current;
  out["staging_bytes.peak"] = st.bytes_peak;
  out["num_staged_copies"] = st.copies;
  return out;
}

void reset_peak_memory_stats(int device) {
  DeviceContext& d = Runtime::get().device(device);
  d.allocator().locked([&](const auto&) { d.stats().reset_peak(); });
  d.staging().reset_peak();
}

void reset_accumulated_memory_stats(int device) {
  DeviceContext& d = Runtime::get().device(device);
  d.allocator().locked([&](const auto&) { d.stats().reset_accumulated(); });
  d.staging().reset_accumulated();
}

uint64_t current_allocated_memory(int device) {
  return Runtime::get().device(device).allocator().allocated_bytes();
}

uint64_t reserved_memory(int device) {
  return Runtime::get().device(device).allocator().reserved_bytes();
}

uint64_t recommended_max_memory(int device) {
  return Runtime::get().device(device).allocator().recommended_max();
}

void empty_cache(int device) {
  DeviceContext& d = Runtime::get().device(device);
  d.allocator().empty_cache();
  d.staging().release_idle();
}

double set_per_process_memory_fraction(double fraction, int device) {
  if (MPSRT_UNLIKELY(!(fraction >= 0.0 && fraction <= 2.0))) {  // NaN included
    // torch.mps's words, which API.md quotes.
    detail::throw_invalid("Invalid fraction value: " + detail::py_float(fraction) +
                          ". Allowed range: 0~2");
  }
  return Runtime::get().device(device).allocator().set_memory_fraction(fraction);
}

double get_per_process_memory_fraction(int device) {
  return Runtime::get().device(device).allocator().memory_fraction();
}

std::pair<uint64_t, uint64_t> mem_get_info(int device) {
  DeviceContext& d = Runtime::get().device(device);
  const uint64_t total = d.backend_device().info().total_memory;
  const uint64_t held = d.backend_device().driver_allocated_bytes();
  return {held < total ? total - held : 0, total};
}

size_t set_cache_limit(size_t bytes, int device) {
  return Runtime::get().device(device).allocator().set_cache_limit(bytes);
}

int add_reclaim_callback(std::function<bool(size_t)> fn, int device) {
  if (!fn) detail::throw_invalid("[allocator] add_reclaim_callback: the callback is empty");
  return Runtime::get().device(device).allocator().add_reclaim_callback(std::move(fn));
}

void remove_reclaim_callback(int id, int device) {
  Runtime::get().device(device).allocator().remove_reclaim_callback(id);
}

namespace {
// Trace actions by name, as torch.cuda's snapshot spells them ("snapshot" is accepted in
// skip_actions and never recorded).
struct ActionName {
  const char* name;
  detail::AllocAction action;
  bool recorded;
};
constexpr ActionName kActionNames[] = {
    {"alloc", detail::AllocAction::Alloc, true},
    {"free_requested", detail::AllocAction::FreeRequested, true},
    {"free_completed", detail::AllocAction::FreeCompleted, true},
    {"segment_alloc", detail::AllocAction::SegmentAlloc, true},
    {"segment_free", detail::AllocAction::SegmentFree, true},
    {"oom", detail::AllocAction::Oom, true},
    {"snapshot", detail::AllocAction::Oom, false},
};

const char* action_name(detail::AllocAction a) {
  for (const ActionName& n : kActionNames) {
    if (n.recorded && n.action == a) return n.name;
  }
  return "unknown";
}
}  // namespace

void record_memory_history(bool enabled, const HistoryOptions& options, int device) {
  uint32_t skip = 0;
  for (const std::string& a : options.skip_actions) {
    const ActionName* found = nullptr;
    for (const ActionName& n : kActionNames) {
      if (a == n.name) found = &n;
    }
    if (found == nullptr) {
      detail::throw_invalid(
          "[allocator] skip_actions: unknown action '" + a +
          "'; expected alloc, free_requested, free_completed, segment_alloc, segment_free, oom "
          "or snapshot");
    }
    if (found->recorded) skip |= detail::action_bit(found->action);
  }
  const auto level = static_cast<uint8_t>(options.context);
  if (level > static_cast<uint8_t>(HistoryContext::All)) {
    detail::throw_invalid("[allocator] record_memory_history: context " + std::to_string(level) +
                          " is out of range; expected a HistoryContext");
  }
  DeviceContext& d = Runtime::get().device(device);
  d.allocator().locked([&](const auto&) {
    d.history().configure(enabled, options.max_entries, options.context, skip,
                          options.clear_history);
  });
  d.allocator().set_context_fn(enabled ? options.frames_fn : nullptr,
                               enabled ? options.context : HistoryContext::None);
}

void record_memory_history(bool enabled, size_t max_entries,
                           std::function<std::shared_ptr<const StackFrames>()> frames_fn,
                           int device) {
  HistoryOptions o;
  o.max_entries = max_entries;
  // As this form always did: allocation stacks only, and no free_completed entries.
  o.context = frames_fn ? HistoryContext::Alloc : HistoryContext::None;
  o.skip_actions = {"free_completed"};
  o.frames_fn = std::move(frames_fn);
  record_memory_history(enabled, o, device);
}

MemorySnapshot memory_snapshot(int device) {
  DeviceContext& d = Runtime::get().device(device);
  MemorySnapshot snap;
  d.allocator().locked([&](const std::set<detail::HeapRec*>& heaps) {
    std::vector<const detail::HeapRec*> sorted(heaps.begin(), heaps.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const detail::HeapRec* a, const detail::HeapRec* b) { return a->base < b->base; });
    for (const detail::HeapRec* h : sorted) {
      SegmentInfo s;
      s.address = h->base;
      s.frames = h->context;
      s.total_size = h->size;
      s.pool = detail::pool_name(h->pool);
      for (const Block* b = h->first; b != nullptr; b = b->next) {
        BlockInfo bi;
        bi.address = b->address();
        bi.size = b->size;
        bi.requested_size = b->requested;
        bi.allocated = b->allocated;
        bi.frames = b->context;
        if (b->allocated) {
          s.allocated_size += b->size;
          s.requested_size += b->requested;
        }
        s.blocks.push_back(std::move(bi));
      }
      snap.segments.push_back(std::move(s));
    }
    for (const detail::TraceEntry& e : d.history().entries()) {
      TraceInfo t;
      t.action = action_name(e.action);
      t.address = e.address;
      t.size = e.size;
      t.stream = e.stream;
      t.time_us = e.time_us;
      t.frames = e.frames;
      snap.trace.push_back(std::move(t));
    }
  });
  return snap;
}

}  // namespace mpsrt
