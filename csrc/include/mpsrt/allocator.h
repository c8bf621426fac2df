// Device memory from the caching allocator: Buffers, statistics, limits, reclaim callbacks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpsrt/api.h"
#include "mpsrt/stream.h"

namespace mpsrt {

namespace detail {
struct Block;
class CachingAllocator;
struct BufferShare;
struct Access;
}  // namespace detail

/// A piece of device memory from the caching allocator. Move-only; the memory returns to the
/// cache when the Buffer is destroyed or reset(), stream-ordered: it is reusable at once on
/// the stream it was allocated on, and on other streams once the work encoded on every stream
/// that used it has completed.
///
/// Views: view(offset, nbytes) gives another Buffer over a byte range of this one's memory
/// (as a numpy view or a torch tensor with a storage offset). The Buffers over one allocation
/// share it: the memory returns to the cache when the last of them is destroyed or reset(),
/// whichever that is; the allocator counts it once. A view is a Buffer in every respect (fill,
/// copy_from, random ops, record_stream: which protects the whole allocation).
class MPSRT_API Buffer {
 public:
  /// An empty Buffer: no memory, defined() is false.
  Buffer() noexcept = default;
  /// nbytes of uninitialised memory on `stream`'s device (0 bytes gives an empty Buffer).
  /// Throws mpsrt::OutOfMemory when the limit or the device refuses, std::invalid_argument
  /// when `stream` is empty.
  Buffer(size_t nbytes, const Stream& stream);
  /// On the current stream of the current device.
  explicit Buffer(size_t nbytes);
  ~Buffer() { reset(); }
  /// Takes o's hold on its memory (and on the allocation it shares with views); o becomes
  /// empty.
  Buffer(Buffer&& o) noexcept
      : block_(o.block_),
        alloc_(o.alloc_),
        share_(o.share_.load(std::memory_order_relaxed)),
        offset_(o.offset_),
        nbytes_(o.nbytes_) {
    o.block_ = nullptr;
    o.alloc_ = nullptr;
    o.share_.store(nullptr, std::memory_order_relaxed);
    o.offset_ = o.nbytes_ = 0;
  }
  /// Lets go of this Buffer's memory as reset() does, then takes o's; o becomes empty.
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  /// True while the Buffer holds memory; false when it is empty (default-constructed, made
  /// with 0 bytes, moved from or reset()).
  bool defined() const noexcept { return block_ != nullptr; }
  /// Bytes requested (a view: the bytes of its range).
  size_t nbytes() const noexcept { return nbytes_; }

  /// A Buffer over bytes [offset, offset + nbytes) of this one (offsets relative to this
  /// Buffer, so a view of a view stays inside it): the same memory, kept alive until every
  /// Buffer over it is gone. Costs one allocation the first time an allocation is shared, then
  /// an atomic increment. Throws std::invalid_argument when the range is not inside
  /// [0, nbytes()), mpsrt::Error when the Buffer belongs to a parent process. A view of an
  /// empty Buffer (only [0, 0) is valid) is empty.
  Buffer view(size_t offset, size_t nbytes) const;
  /// Bytes from the start of the allocation to this Buffer's first byte (0 unless a view).
  size_t offset() const noexcept { return offset_; }
  /// True while another Buffer (a view, or the Buffer this one views) shares the allocation.
  bool shared() const noexcept;
  /// Index of the device that holds the memory; -1 when the Buffer is empty.
  int device() const noexcept;
  /// The stream it was allocated on.
  Stream stream() const noexcept;
  /// The device address of the first byte: the host address on unified memory, the device's
  /// own address on discrete memory (DeviceProperties::unified_memory); unique among live
  /// allocations of the device (a view: the allocation's address + offset()).
  uint64_t address() const noexcept;
  /// Host address of the memory on unified memory (the host reads and writes it directly),
  /// nullptr on discrete memory (use copy_to_host / copy_from_host).
  void* host_ptr() const noexcept;
  /// Marks the buffer as used by `stream`: its memory (for a view: the whole allocation) will
  /// not be reused on another stream until that stream's work encoded so far has completed.
  /// Throws std::invalid_argument when the stream is on another device.
  void record_stream(const Stream& stream);
  /// Frees now (stream-ordered); the Buffer becomes empty. While other Buffers share the
  /// allocation (views), only this Buffer's hold on it goes; the last one frees. In a child
  /// process forked after the Buffer was made, the memory is the parent's: it is left alone and
  /// the Buffer empties.
  void reset() noexcept;
  /// Throws mpsrt::Error when the Buffer belongs to the runtime of a parent process (this
  /// process was forked after it was made). Every operation below checks it.
  void check_owner() const;

  /// Encodes a fill of the whole buffer with a 1/2/4/8-byte pattern on `stream` (the low
  /// pattern_size bytes of `pattern`, little-endian; a tail shorter than the pattern is left
  /// as it was). Throws std::invalid_argument for another pattern size or a stream on another
  /// device.
  void fill(uint64_t pattern, unsigned pattern_size, const Stream& stream);
  /// Copies src's bytes into this buffer (same size; src may be this buffer), `stream` being a
  /// stream of this buffer's device.
  /// - src on this device: a copy encoded on `stream` (asynchronous, stream-ordered).
  /// - src on another device (a cross-device copy, as a cross-device tensor.copy_ on CUDA): the
  ///   copy comes after the work queued so far on the calling thread's current stream of src's
  ///   device and on `stream`, and work encoded later on either sees it done: it waits for both
  ///   streams, then moves the bytes through the host (unified memory: one memmove between the
  ///   two buffers' host memory; discrete memory: staged, on src's device's current stream and
  ///   on `stream`), and is complete when it returns. The profiler records it as a
  ///   "copy_peer" host copy on the destination's device. Other streams' work is not waited for (as
  ///   on CUDA).
  /// Throws std::invalid_argument when the sizes differ or the stream is not on this buffer's
  /// device, mpsrt::Error when a command of either stream failed.
  void copy_from(const Buffer& src, const Stream& stream);
  /// Copies nbytes (the buffer's size) from host memory, after the device's pending work (on
  /// every stream), complete when it returns. Unified memory: one memmove (the source may
  /// overlap the buffer's own host memory). Discrete memory: staged through the device's
  /// staging pool on the calling thread's current stream, in pieces when larger than the pool.
  /// Throws std::invalid_argument when the sizes differ or src is null, mpsrt::OutOfMemory
  /// when no staging memory can be had, mpsrt::Error when a command fails.
  void copy_from_host(const void* src, size_t nbytes);
  /// Copies the buffer's nbytes into host memory at dst, after the device's pending work (on
  /// every stream), complete when it returns: one memmove on unified memory, staged on
  /// discrete memory (as copy_from_host). Throws as copy_from_host.
  void copy_to_host(void* dst, size_t nbytes) const;

 private:
  friend struct detail::Access;  // the core's way in (csrc/core/access.h)
  // Discrete memory: copies from `from` (when set) or into `to` through the staging pool.
  void stage(const void* from, void* to) const;
  // copy_from's path for a source on another device.
  void copy_from_peer(const Buffer& src, const Stream& stream);
  detail::Block* block_ = nullptr;
  detail::CachingAllocator* alloc_ = nullptr;
  // The count of Buffers over the allocation; null until the first view is made (a Buffer
  // that was never shared frees without touching it).
  mutable std::atomic<detail::BufferShare*> share_{nullptr};
  size_t offset_ = 0;
  size_t nbytes_ = 0;
};

/// torch.cuda-style statistics: keys such as "allocated_bytes.all.current",
/// "reserved_bytes.large_pool.peak", "num_alloc_retries", "num_ooms"; and the staging pool's
/// "staging_bytes.current", "staging_bytes.peak" (host memory it holds) and "num_staged_copies"
/// (host copies that went through it; 0 on unified memory).
MPSRT_API std::map<std::string, int64_t> memory_stats(int device = -1);
/// Sets peak values to the current ones.
MPSRT_API void reset_peak_memory_stats(int device = -1);
/// Bytes held by live buffers (block sizes) on the device.
MPSRT_API uint64_t current_allocated_memory(int device = -1);
/// Bytes of heaps the allocator holds (allocated + cached).
MPSRT_API uint64_t reserved_memory(int device = -1);
/// The device's recommended working-set size (the base of the memory fraction).
MPSRT_API uint64_t recommended_max_memory(int device = -1);
/// Zeroes the accumulated figures of memory_stats() (torch.cuda's
/// reset_accumulated_memory_stats): every stat's "allocated" and "freed" totals and the
/// num_* counters (num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc,
/// num_device_free, num_empty_cache). Current and peak values stay.
MPSRT_API void reset_accumulated_memory_stats(int device = -1);
/// Commits every stream's work on the device (counted in num_sync_all_streams) and waits for the
/// work that cached blocks' frees still wait for, then releases every cached, unused heap of the
/// device back to the driver, and the staging memory no copy uses: afterwards the device's
/// reserved memory is what its live Buffers' heaps hold.
MPSRT_API void empty_cache(int device = -1);
/// Hard limit = fraction x recommended_max_memory (0: unlimited). Returns the previous
/// fraction. Throws std::invalid_argument outside [0, 2] or for NaN, with torch.mps's message
/// "Invalid fraction value: <fraction>. Allowed range: 0~2".
MPSRT_API double set_per_process_memory_fraction(double fraction, int device = -1);
/// The fraction in force (MPSRT_HIGH_WATERMARK_RATIO until set; 0: unlimited).
MPSRT_API double get_per_process_memory_fraction(int device = -1);
/// (free, total) bytes of the device, as torch.cuda.mem_get_info: total is the device's
/// total_memory; free is what of it this process's heaps do not hold
/// (total - driver_allocated_memory, at least 0).
MPSRT_API std::pair<uint64_t, uint64_t> mem_get_info(int device = -1);
/// Cap on cached-but-unused bytes; returns the previous cap (SIZE_MAX: none). Every value is
/// valid (0: keep nothing cached).
MPSRT_API size_t set_cache_limit(size_t bytes, int device = -1);
/// A reclaim callback runs when an allocation would fail, with the bytes needed; it may free
/// memory and returns true to ask for a retry. Returns an id for remove_reclaim_callback.
/// Throws std::invalid_argument for an empty fn, or (remove) an id that is not registered.
MPSRT_API int add_reclaim_callback(std::function<bool(size_t)> fn, int device = -1);
/// Unregisters the reclaim callback that add_reclaim_callback() returned `id` for on `device`.
MPSRT_API void remove_reclaim_callback(int id, int device = -1);

// ---------------------------------------------------------------- history and snapshots

/// A frame of the code that made an allocation: an interpreter's frame (filename, line,
/// name), or a native one, whose `pc` (return address) is set and whose other fields stay
/// empty until symbolize_native_frame() names it (symbolised when read, not when recorded).
struct StackFrame {
  /// The source file (an interpreter's frame); the shared object or executable that holds `pc`
  /// (a native frame, once symbolised).
  std::string filename;
  /// The line (an interpreter's frame); pc's offset in its file minus 1 (a native frame).
  int line = 0;
  /// The function (a native frame: its demangled name, "??" where unknown).
  std::string name;
  uintptr_t pc = 0;  ///< nonzero: a native frame
};
/// A stack of frames, innermost first.
using StackFrames = std::vector<StackFrame>;

/// The calling thread's native frames, innermost first, unsymbolised (pc only): cheap enough
/// to take per allocation. `skip` more innermost frames are left out (native_stack's own
/// always is). Empty where the platform has no unwinder.
MPSRT_API StackFrames native_stack(size_t skip = 0);
/// Names a native frame as torch's dladdr symbolizer does: filename is the shared object or
/// executable that holds `pc`, line the pc's offset in it minus 1, name the demangled function
/// (from the file's symbol table, so hidden functions are named too; "??" where unknown).
/// Cached: each pc is looked up once per process.
MPSRT_API StackFrame symbolize_native_frame(uintptr_t pc);

/// A block of a heap in a memory_snapshot(): a live allocation or a free piece of the cache.
struct BlockInfo {
  uint64_t address = 0;       ///< the device address of its first byte
  size_t size = 0;            ///< bytes of the block (the request rounded up to its size class)
  size_t requested_size = 0;  ///< bytes the allocation asked for (0 for a free block)
  bool allocated = false;     ///< a live allocation (true) or cached free memory (false)
  std::shared_ptr<const StackFrames> frames;  ///< who allocated it (when recorded), else null
};

/// A heap the allocator holds (torch.cuda's segment) in a memory_snapshot().
struct SegmentInfo {
  uint64_t address = 0;                       ///< the device address of its first byte
  std::shared_ptr<const StackFrames> frames;  ///< who made the heap (when recorded)
  size_t total_size = 0;                      ///< bytes of the heap
  size_t allocated_size = 0;                  ///< bytes of its allocated blocks
  size_t requested_size = 0;                  ///< bytes their allocations asked for
  std::string pool;                           ///< "small", "large" or "huge"
  std::vector<BlockInfo> blocks;              ///< its blocks, in address order
};

/// An event of the allocation history (record_memory_history()), as torch.cuda's trace entry.
struct TraceInfo {
  /// alloc, free_requested, free_completed, segment_alloc, segment_free, oom
  std::string action;
  uint64_t address = 0;  ///< the device address of the block or heap (0 for oom)
  size_t size = 0;       ///< bytes of the block or heap (oom: the bytes that were asked for)
  int64_t stream = 0;    ///< the id (Stream::id()) of the block's stream; 0 for heap events and oom
  int64_t time_us = 0;   ///< when it happened, in microseconds since the Unix epoch
  /// The stack that HistoryOptions::context keeps for the event, else null.
  std::shared_ptr<const StackFrames> frames;
};

/// What memory_snapshot() returns.
struct MemorySnapshot {
  std::vector<SegmentInfo> segments;  ///< the device's heaps, in address order
  std::vector<TraceInfo> trace;       ///< the recorded events, oldest first
};

/// Which stacks history keeps (torch.cuda's `context` of _record_memory_history).
enum class HistoryContext : uint8_t {
  None,   ///< no stacks
  State,  ///< stacks of the live blocks, and of each segment until none of its blocks is live
  Alloc,  ///< and in trace entries: allocations' stacks (frees carry their allocation's)
  All,    ///< and frees' own stacks in free_requested / free_completed / segment_free
};

/// How record_memory_history() records (torch.cuda's _record_memory_history arguments).
struct HistoryOptions {
  /// The newest trace entries kept (0: unlimited).
  size_t max_entries = 0;
  /// Which stacks are kept.
  HistoryContext context = HistoryContext::All;
  /// Trace actions not recorded: any of alloc, free_requested, free_completed,
  /// segment_alloc, segment_free, oom, snapshot.
  std::vector<std::string> skip_actions;
  /// Drop the entries recorded so far.
  bool clear_history = false;
  /// Called (outside the allocator's lock) for the calling code's frames, innermost first;
  /// none: no stacks whatever `context` says.
  std::function<std::shared_ptr<const StackFrames>()> frames_fn;
};

/// Starts (enabled) or stops recording allocation events. Throws std::invalid_argument for
/// an unknown skip action ("[allocator] skip_actions: unknown action '<a>'; expected ...") or a
/// context out of range.
MPSRT_API void record_memory_history(bool enabled, const HistoryOptions& options, int device = -1);
/// The earlier form: allocation stacks (HistoryContext::Alloc) when frames_fn is set, none
/// otherwise; free_completed is not recorded.
MPSRT_API void record_memory_history(bool enabled, size_t max_entries,
                                     std::function<std::shared_ptr<const StackFrames>()> frames_fn,
                                     int device = -1);
/// The device's heaps and blocks now, and the recorded events.
MPSRT_API MemorySnapshot memory_snapshot(int device = -1);

}  // namespace mpsrt
