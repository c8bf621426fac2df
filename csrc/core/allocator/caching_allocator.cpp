#include "core/allocator/caching_allocator.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <utility>

#include "mpsrt/error.h"

namespace mpsrt::detail {

namespace {

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

size_t min_split(Pool p) {
  return p == Pool::Small ? kBlockAlign : kMinLargeSplit;
}

std::string human(uint64_t n) {
  char buf[48];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", n);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

// Keeps, per stream, the highest fence.
void merge_fences(std::vector<StreamFence>& into, const std::vector<StreamFence>& from) {
  for (const StreamFence& f : from) {
    bool found = false;
    for (StreamFence& g : into) {
      if (g.stream == f.stream) {
        g.value = std::max(g.value, f.value);
        found = true;
        break;
      }
    }
    if (!found) into.push_back(f);
  }
}

}  // namespace

uint64_t Block::address() const noexcept {
  return heap->base + offset;
}

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const noexcept {
  if (a->size != b->size) return a->size < b->size;
  const uint64_t ha = a->heap ? a->heap->serial : 0;
  const uint64_t hb = b->heap ? b->heap->serial : 0;
  if (ha != hb) return ha < hb;
  return a->offset < b->offset;
}

CachingAllocator::CachingAllocator(AllocDevice& device, double high_ratio, double low_ratio)
    : device_(device),
      recommended_max_(device.recommended_max_memory()),
      high_ratio_(high_ratio),
      low_ratio_(low_ratio),
      max_buffer_(device.max_buffer_size()) {}

CachingAllocator::~CachingAllocator() {
  // Every buffer must be gone (the runtime is torn down only after the device is idle).
  for (HeapRec* h : heaps_) {
    for (Block* b = h->first; b != nullptr;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
    delete h;
  }
  for (Block* b : spare_blocks_) delete b;
}

uint64_t CachingAllocator::high_limit() const {
  return high_ratio_ > 0.0
             ? static_cast<uint64_t>(high_ratio_ * static_cast<double>(recommended_max_))
             : 0;
}

void CachingAllocator::update_pressure() noexcept {
  const double low = low_ratio_ * static_cast<double>(recommended_max_);
  pressure_.store(low > 0.0 && static_cast<double>(reserved_) >= 0.9 * low,
                  std::memory_order_relaxed);
}

Block* CachingAllocator::new_block() {
  if (!spare_blocks_.empty()) {
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    return b;
  }
  return new Block();
}

void CachingAllocator::delete_block(Block* b) {
  // Keep the vectors' capacity: a reused Block then allocates nothing.
  std::vector<AllocStream*> uses = std::move(b->uses);
  std::vector<StreamFence> fences = std::move(b->fences);
  uses.clear();
  fences.clear();
  *b = Block();
  b->uses = std::move(uses);
  b->fences = std::move(fences);
  spare_blocks_.push_back(b);
}

Block*& CachingAllocator::bin_head(size_t size) {
  if (size <= kSmallRequest) return small_bins_[size / kBlockAlign];
  return large_bins_[size];
}

Block* CachingAllocator::try_bin(size_t size, AllocStream& stream) {
  if (binned_.empty()) return nullptr;
  Block*& head = bin_head(size);
  Block* b = head;
  if (b == nullptr || !fences_reached(b, &stream)) return nullptr;
  head = b->next_in_bin;
  b->next_in_bin = nullptr;
  b->binned = false;
  Block* last = binned_.back();
  binned_[b->bin_pos] = last;
  last->bin_pos = b->bin_pos;
  binned_.pop_back();
  return finish_take(b, stream);
}

void CachingAllocator::flush_bins() {
  if (binned_.empty()) return;
  std::vector<Block*> list;
  list.swap(binned_);
  for (Block* b : list) {
    if (b->size <= kSmallRequest) small_bins_[b->size / kBlockAlign] = nullptr;
  }
  large_bins_.clear();
  // One at a time: a block still binned is never merged into another, so every pointer in
  // `list` stays valid until its turn.
  for (Block* b : list) {
    b->binned = false;
    b->next_in_bin = nullptr;
    merge_and_insert(b);
  }
  list.clear();
  binned_.swap(list);  // keep the capacity
}

void CachingAllocator::merge_and_insert(Block* b) {
  if (b->prev != nullptr && !b->prev->allocated && !b->prev->binned) {
    Block* p = b->prev;
    erase_free(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    merge_fences(p->fences, b->fences);
    delete_block(b);
    b = p;
  }
  if (b->next != nullptr && !b->next->allocated && !b->next->binned) {
    Block* n = b->next;
    erase_free(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    merge_fences(b->fences, n->fences);
    delete_block(n);
  }
  insert_free(b);
}

void CachingAllocator::insert_free(Block* b) {
  free_[free_set(b->pool)].insert(b);
}
void CachingAllocator::erase_free(Block* b) {
  free_[free_set(b->pool)].erase(b);
}

void CachingAllocator::emit(const AllocEvent& e) {
  for (AllocatorObserver* o : observers_) o->on_event(e);
}

bool CachingAllocator::fences_reached(const Block* b, const AllocStream* except) const {
  for (const StreamFence& f : b->fences) {
    if (f.stream != except && !f.stream->reached(f.value)) return false;
  }
  return true;
}

Block* CachingAllocator::take(Block* b, size_t size, AllocStream& stream) {
  erase_free(b);
  if (b->size - size >= min_split(b->pool)) {
    Block* r = new_block();
    r->heap = b->heap;
    r->pool = b->pool;
    r->offset = b->offset + size;
    r->size = b->size - size;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    r->fences = b->fences;
    insert_free(r);
    b->size = size;
  }
  return finish_take(b, stream);
}

Block* CachingAllocator::finish_take(Block* b, AllocStream& stream) {
  b->allocated = true;
  b->stream = &stream;
  b->fences.clear();
  b->uses.clear();
  b->heap->allocated += b->size;
  allocated_ += b->size;
  return b;
}

Block* CachingAllocator::try_reuse(Pool pool, size_t size, AllocStream& stream) {
  auto& set = free_[free_set(pool)];
  Block key;
  key.size = size;
  int scanned = 0;
  // Cost: one O(log n) search; the scan past blocks still in use elsewhere is bounded.
  for (auto it = set.lower_bound(&key); it != set.end() && scanned < 64; ++it, ++scanned) {
    Block* b = *it;
    if (fences_reached(b, &stream)) return take(b, size, stream);
  }
  return nullptr;
}

Block* CachingAllocator::try_new_heap(Pool pool, size_t size, size_t heap_size, AllocStream& stream,
                                      bool* limited, const ContextPtr& ctx) {
  const uint64_t limit = high_limit();
  if (limit != 0 && reserved_ + heap_size > limit) {
    *limited = true;
    return nullptr;
  }
  std::unique_ptr<backend::Heap> heap = device_.create_heap(heap_size);
  if (!heap) return nullptr;
  auto* rec = new HeapRec();
  rec->pool = pool;
  rec->size = heap->size();
  rec->serial = ++next_heap_serial_;
  rec->base = heap->address();  // the host address on unified memory, else the device's
  if (rec->base == 0) rec->base = rec->serial << 40;  // a heap with no address: a synthetic one
  rec->heap = std::move(heap);
  rec->context = ctx;
  Block* b = new_block();
  b->heap = rec;
  b->pool = pool;
  b->size = rec->size;
  rec->first = b;
  heaps_.insert(rec);
  reserved_ += rec->size;
  update_pressure();
  AllocEvent e{AllocAction::SegmentAlloc};
  e.pool = pool;
  e.address = rec->base;
  e.size = rec->size;
  e.context = &rec->context;
  emit(e);
  insert_free(b);
  return take(b, size, stream);
}

void CachingAllocator::release_heap(HeapRec* h, const ContextPtr* ctx) {
  erase_free(h->first);
  delete_block(h->first);
  reserved_ -= h->size;
  update_pressure();
  AllocEvent e{AllocAction::SegmentFree};
  e.pool = h->pool;
  e.address = h->base;
  e.size = h->size;
  e.context = ctx != nullptr && *ctx != nullptr ? ctx : &h->context;
  emit(e);
  heaps_.erase(h);
  delete h;  // returns the memory to the backend
}

size_t CachingAllocator::release_heaps(size_t target, bool large_only, const ContextPtr* ctx) {
  flush_bins();
  std::vector<HeapRec*> empty;
  for (HeapRec* h : heaps_) {
    if (large_only && h->pool == Pool::Small) continue;
    if (h->allocated == 0 && h->first->next == nullptr && fences_reached(h->first, nullptr)) {
      empty.push_back(h);
    }
  }
  // Oldest first.
  std::sort(empty.begin(), empty.end(),
            [](const HeapRec* a, const HeapRec* b) { return a->freed_tick < b->freed_tick; });
  size_t released = 0;
  for (HeapRec* h : empty) {
    if (released >= target) break;
    released += h->size;
    release_heap(h, ctx);
  }
  return released;
}

SizeClass size_class(size_t nbytes) noexcept {
  if (nbytes <= kSmallRequest) {
    return {Pool::Small, round_up(std::max<size_t>(nbytes, 1), kBlockAlign), kSmallHeap};
  }
  // Blocks of every pool grow in 512 B steps; huge requests get heaps of their own size.
  const size_t size = round_up(nbytes, kBlockAlign);
  if (nbytes < kLargeRequest) return {Pool::Large, size, kLargeHeap};
  return {Pool::Huge, size, round_up(nbytes, kHugeRound)};
}

// The fast path: the size class and a pop from its exact-size bin, under the lock; the ladder
// of allocate_slow() otherwise.
Block* CachingAllocator::allocate(size_t nbytes, AllocStream& stream) {
  if (MPSRT_UNLIKELY(nbytes > max_buffer_)) refuse_oversize(nbytes);
  const SizeClass sc = size_class(nbytes);
  ContextPtr ctx;
  if (MPSRT_UNLIKELY(recording_.load(std::memory_order_relaxed))) {
    ctx = gather(HistoryContext::State);
  }
  std::unique_lock<SpinLock> lock(mu_);
  Block* b = try_bin(sc.size, stream);
  if (MPSRT_UNLIKELY(b == nullptr)) {
    Request r{sc, stream, sc.heap_size, false, ctx};
    b = allocate_slow(r, lock);
  }
  b->requested = nbytes;
  b->id = ++next_block_id_;
  b->context = std::move(ctx);
  AllocEvent e{AllocAction::Alloc};
  e.pool = sc.pool;
  e.address = b->address();
  e.size = b->size;
  e.requested = nbytes;
  e.stream = stream.id();
  e.split = b->prev != nullptr || b->next != nullptr;
  e.context = &b->context;
  emit(e);
  return b;
}

void CachingAllocator::refuse_oversize(size_t nbytes) {
  const size_t max_buffer = max_buffer_;
  {
    std::lock_guard<SpinLock> lock(mu_);
    emit(AllocEvent{AllocAction::Oom, Pool::Small, 0, nbytes});
  }
  throw_oom("[allocator] cannot allocate " + human(nbytes) + " on device " +
            std::to_string(device_.index()) + ": larger than the device's max_buffer_size (" +
            human(max_buffer) + ")");
}

// The ladder: each rung frees or finds memory, then looks again for a cached block and for a
// new heap; the first block found ends it. Called with mu_ held; the rungs that call out
// (reclaim callbacks, waiting for the device) drop it meanwhile.
Block* CachingAllocator::allocate_slow(Request& r, std::unique_lock<SpinLock>& lock) {
  if (Block* b = reuse_merged(r)) return b;  // allocate() has just tried the exact-size bin
  if (Block* b = grow(r)) return b;
  emit(AllocEvent{AllocAction::Retry});
  if (Block* b = after_reclaim_callbacks(r, lock)) return b;
  release_heaps(SIZE_MAX, false, &r.ctx);  // free every cached heap
  if (Block* b = reuse_or_new_heap(r)) return b;
  lock.unlock();  // wait for every stream, then free every cached heap
  device_.wait_idle();
  lock.lock();
  emit(AllocEvent{AllocAction::SyncAllStreams});
  release_heaps(SIZE_MAX, false, &r.ctx);
  if (Block* b = reuse_or_new_heap(r)) return b;
  raise_oom(r.sc.pool, r.sc.size, r.plain_heap, r.limited);
}

// A cached block: the exact-size bin, then the best fit over every merged free block.
Block* CachingAllocator::reuse(Request& r) {
  if (Block* b = try_bin(r.sc.size, r.stream)) return b;
  return reuse_merged(r);
}

// The best fit over every merged free block (the binned ones merged in first if need be).
Block* CachingAllocator::reuse_merged(Request& r) {
  Block* b = try_reuse(r.sc.pool, r.sc.size, r.stream);
  if (b != nullptr || binned_.empty()) return b;
  flush_bins();
  return try_reuse(r.sc.pool, r.sc.size, r.stream);
}

// A new heap of the request's heap size; if that (consolidated) size does not fit the limit or
// the device, one of the request's plain heap size.
Block* CachingAllocator::new_heap(Request& r) {
  Block* b = try_new_heap(r.sc.pool, r.sc.size, r.sc.heap_size, r.stream, &r.limited, r.ctx);
  if (b == nullptr && r.sc.heap_size != r.plain_heap) {
    b = try_new_heap(r.sc.pool, r.sc.size, r.plain_heap, r.stream, &r.limited, r.ctx);
  }
  return b;
}

Block* CachingAllocator::reuse_or_new_heap(Request& r) {
  Block* b = reuse(r);
  return b != nullptr ? b : new_heap(r);
}

// No cached block fits: collect cached heaps down to the low watermark, consolidate the
// wholly free large and huge heaps into the new one, and make it.
Block* CachingAllocator::grow(Request& r) {
  const uint64_t low =
      low_ratio_ > 0.0 ? static_cast<uint64_t>(low_ratio_ * static_cast<double>(recommended_max_))
                       : 0;
  if (low != 0 && reserved_ + r.sc.heap_size > low) {
    release_heaps(reserved_ + r.sc.heap_size - low, false, &r.ctx);  // oldest first
  }
  if (r.sc.pool != Pool::Small) {
    // Wholly free large/huge heaps could not serve this request, so give them back and make
    // one heap big enough for them and the request. Reserved grows by the request either way,
    // but the next requests of other sizes then split one contiguous heap instead of finding
    // none of the old heaps big enough.
    const size_t freed = release_heaps(SIZE_MAX, /*large_only=*/true, &r.ctx);
    if (freed != 0)
      r.sc.heap_size = round_up(std::max(r.sc.heap_size, freed + r.sc.size), kHugeRound);
  }
  return new_heap(r);
}

// The reclaim callbacks (outside the lock), then one more look if any says it freed memory.
Block* CachingAllocator::after_reclaim_callbacks(Request& r, std::unique_lock<SpinLock>& lock) {
  if (reclaim_.empty()) return nullptr;
  std::vector<std::function<bool(size_t)>> fns;
  for (auto& kv : reclaim_) fns.push_back(kv.second);
  lock.unlock();
  bool retry = false;
  for (auto& fn : fns) {
    try {
      retry = fn(r.sc.size) || retry;
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "[allocator] a reclaim callback raised and was skipped: %s\n",
                   ex.what());
    }
  }
  lock.lock();
  return retry ? reuse_or_new_heap(r) : nullptr;
}

void CachingAllocator::raise_oom(Pool pool, size_t size, size_t heap_size, bool limited) {
  emit(AllocEvent{AllocAction::Oom, pool, 0, size});
  const uint64_t limit = high_limit();
  std::string msg = "[allocator] out of memory on device " + std::to_string(device_.index()) +
                    ": tried to allocate " + human(size) + " from the " + pool_name(pool) +
                    " pool (a new heap of " + human(heap_size) + "); allocated " +
                    human(allocated_) + ", cached " + human(reserved_ - allocated_) +
                    " (reserved " + human(reserved_) + "); ";
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.3g", high_ratio_);
  if (limited) {
    msg += "limit " + human(limit) + " = " + ratio + " x recommended_max_memory (" +
           human(recommended_max_) +
           "). Raise it with set_per_process_memory_fraction() or MPSRT_HIGH_WATERMARK_RATIO "
           "(0 disables the limit; the device may then run out of memory)";
  } else {
    msg += std::string("the ") + "device refused a heap of " + human(heap_size) +
           (limit ? " (limit " + human(limit) + ")" : std::string(" (no limit set)")) +
           ". Free buffers or lower the working set";
  }
  throw_oom(msg);
}

void CachingAllocator::free(Block* b) noexcept {
  // The block is the caller's until it is handed back: record the fences outside the lock.
  // Cost: one atomic load per stream; the vector keeps its capacity (no allocation).
  b->fences.clear();
  b->fences.push_back({b->stream, b->stream->fence_value()});
  for (AllocStream* s : b->uses) b->fences.push_back({s, s->fence_value()});
  ContextPtr ctx;
  ContextPtr segment_ctx;  // a wholly free heap's stack with the "state" context (see below)
  // With history's "all" context the free carries its own frames (else the allocation's).
  ContextPtr free_ctx;
  if (MPSRT_UNLIKELY(recording_.load(std::memory_order_relaxed))) {
    free_ctx = gather(HistoryContext::All);
  }
  {
    std::lock_guard<SpinLock> lock(mu_);
    AllocEvent e{AllocAction::FreeRequested};
    e.pool = b->pool;
    e.address = b->address();
    e.size = b->size;
    e.requested = b->requested;
    e.stream = b->stream->id();
    e.split = b->prev != nullptr || b->next != nullptr;
    e.context = free_ctx != nullptr ? &free_ctx : &b->context;
    emit(e);
    HeapRec* h = b->heap;
    h->allocated -= b->size;
    allocated_ -= b->size;
    b->allocated = false;
    b->requested = 0;
    b->uses.clear();
    b->stream = nullptr;
    ctx = std::move(b->context);
    if (b->fences.size() == 1) {
      // Used by its own stream only: into the exact-size bin, unmerged.
      Block*& head = bin_head(b->size);
      b->next_in_bin = head;
      head = b;
      b->binned = true;
      b->bin_pos = binned_.size();
      binned_.push_back(b);
    } else {
      merge_and_insert(b);
    }
    if (h->allocated == 0) {
      h->freed_tick = ++clock_;
      // "state" keeps the stacks of what is live only (torch's test_memory_plots_free_stack):
      // a cached heap with no live block no longer shows who made it. The trace, which has
      // the stacks from "alloc" on, keeps the heap's in the other contexts.
      if (context_level_.load(std::memory_order_relaxed) ==
          static_cast<uint8_t>(HistoryContext::State)) {
        segment_ctx = std::move(h->context);
      }
    }
    if (cache_limit_ != SIZE_MAX && reserved_ - allocated_ > cache_limit_) {
      flush_bins();
      release_heaps(reserved_ - allocated_ - cache_limit_, false, &free_ctx);
    }
  }
}

void CachingAllocator::record_stream(Block* b, AllocStream& stream) {
  std::lock_guard<SpinLock> lock(mu_);
  if (&stream == b->stream) return;
  if (std::find(b->uses.begin(), b->uses.end(), &stream) == b->uses.end()) {
    b->uses.push_back(&stream);
  }
}

void CachingAllocator::empty_cache() {
  ContextPtr ctx;
  if (MPSRT_UNLIKELY(recording_.load(std::memory_order_relaxed))) ctx = gather(HistoryContext::All);
  // The pass over all streams (torch.cuda's synchronize_and_free_events, counted in
  // num_sync_all_streams): every stream's pending work is committed, then the work that the
  // wholly free heaps still wait for is waited for, so that every cached heap is released
  // (as torch waits for the events of blocks whose free is pending). Work that no cached heap
  // waits for is not waited for.
  device_.flush_streams();
  for (const StreamFence& f : pending_heap_fences()) {
    // A fence past the committed work was encoded after the flush (another thread): not ours.
    if (f.value <= f.stream->committed_value()) f.stream->wait_reached(f.value);
  }
  std::lock_guard<SpinLock> lock(mu_);
  emit(AllocEvent{AllocAction::SyncAllStreams});
  release_heaps(SIZE_MAX, false, &ctx);
  emit(AllocEvent{AllocAction::EmptyCache});
}

std::vector<StreamFence> CachingAllocator::pending_heap_fences() {
  std::vector<StreamFence> waits;
  std::lock_guard<SpinLock> lock(mu_);
  flush_bins();  // merged: a heap with nothing allocated is then one free block
  for (HeapRec* h : heaps_) {
    if (h->allocated != 0) continue;
    for (const StreamFence& f : h->first->fences) {
      if (!f.stream->reached(f.value)) waits.push_back(f);
    }
  }
  return waits;
}

ContextPtr CachingAllocator::gather(HistoryContext level) noexcept {
  if (context_level_.load(std::memory_order_relaxed) < static_cast<uint8_t>(level)) return nullptr;
  ContextFn fn;
  {
    std::lock_guard<SpinLock> lock(mu_);
    fn = context_fn_;
  }
  if (!fn) return nullptr;
  try {
    return fn();
  } catch (const std::exception&) {
    return nullptr;  // frames are a diagnostic: never a reason to fail an allocation or free
  }
}

double CachingAllocator::memory_fraction() const {
  std::lock_guard<SpinLock> lock(mu_);
  return high_ratio_;
}

double CachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 2.0)) {
    throw_invalid("[allocator] invalid memory fraction " + std::to_string(fraction) +
                  ": expected 0 <= fraction <= 2 (0 disables the limit)");
  }
  std::lock_guard<SpinLock> lock(mu_);
  const double prev = high_ratio_;
  high_ratio_ = fraction;
  return prev;
}

size_t CachingAllocator::set_cache_limit(size_t bytes) {
  std::lock_guard<SpinLock> lock(mu_);
  const size_t prev = cache_limit_;
  cache_limit_ = bytes;
  if (cache_limit_ != SIZE_MAX && reserved_ - allocated_ > cache_limit_) {
    release_heaps(reserved_ - allocated_ - cache_limit_);
  }
  return prev;
}

int CachingAllocator::add_reclaim_callback(std::function<bool(size_t)> fn) {
  std::lock_guard<SpinLock> lock(mu_);
  const int id = next_reclaim_id_++;
  reclaim_[id] = std::move(fn);
  return id;
}

void CachingAllocator::remove_reclaim_callback(int id) {
  std::function<bool(size_t)> dropped;  // destroyed outside the lock
  std::lock_guard<SpinLock> lock(mu_);
  auto it = reclaim_.find(id);
  if (it == reclaim_.end()) {
    throw_invalid("[allocator] no reclaim callback with id " + std::to_string(id));
  }
  dropped = std::move(it->second);
  reclaim_.erase(it);
}

uint64_t CachingAllocator::allocated_bytes() const {
  std::lock_guard<SpinLock> lock(mu_);
  return allocated_;
}

uint64_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<SpinLock> lock(mu_);
  return reserved_;
}

void CachingAllocator::add_observer(AllocatorObserver* o) {
  std::lock_guard<SpinLock> lock(mu_);
  observers_.push_back(o);
}

void CachingAllocator::set_context_fn(ContextFn fn, HistoryContext level) {
  ContextFn old;  // destroyed outside the lock
  std::lock_guard<SpinLock> lock(mu_);
  if (level == HistoryContext::None) fn = nullptr;
  context_level_.store(static_cast<uint8_t>(level), std::memory_order_relaxed);
  recording_.store(static_cast<bool>(fn), std::memory_order_relaxed);
  old = std::move(context_fn_);
  context_fn_ = std::move(fn);
}

}  // namespace mpsrt::detail
