// The cpu backend: host memory as device memory, worker threads as the device's queues.
//
//   Heap          - an anonymous mmap (2 MiB-aligned with MADV_HUGEPAGE when large)
//   Queue         - one worker thread that runs committed command buffers in order
//   CommandBuffer - a vector of recorded commands
//   TimelineEvent - an atomic 64-bit value with a spin-then-park wait
#include "backends/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "backends/backend.h"
#include "backends/cpu/cpu_info.h"
#include "backends/cpu/park.h"
#include "backends/cpu/simd_ops.h"
#include "backends/cpu/thread_pool.h"
#include "backends/recording.h"
#include "mpsrt/error.h"

namespace mpsrt::cpu {
namespace {

using backend::BufferRef;
using backend::Completion;
using backend::CompletionFn;

constexpr size_t kHugePage = size_t(2) << 20;

class CpuEvent final : public backend::TimelineEvent {
 public:
  explicit CpuEvent(int64_t spin_ns) : spin_ns_(spin_ns) {}
  // A waiter that sees the new value may destroy the event at once, while the signalling
  // thread is still inside notify(); the destructor waits for signals in flight to leave.
  ~CpuEvent() override {
    while (signalling_.load(std::memory_order_acquire) != 0) cpu_relax();
  }
  void signal(uint64_t v) override {
    signalling_.fetch_add(1, std::memory_order_relaxed);
    uint64_t cur = value_.load(std::memory_order_relaxed);
    while (cur < v && !value_.compare_exchange_weak(cur, v, std::memory_order_release)) {
    }
    park_.notify();
    signalling_.fetch_sub(1, std::memory_order_release);
  }
  bool wait(uint64_t target, int64_t timeout_ns) override {
    return park_.wait([&] { return value_.load(std::memory_order_acquire) >= target; }, spin_ns_,
                      timeout_ns);
  }
  uint64_t value() const override { return value_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> value_{0};
  std::atomic<uint32_t> signalling_{0};
  ParkWord park_;
  int64_t spin_ns_;
};

class CpuHeap final : public backend::Heap {
 public:
  CpuHeap(void* base, size_t size, std::atomic<uint64_t>* held)
      : base_(base), size_(size), held_(held) {
    held_->fetch_add(size_, std::memory_order_relaxed);
  }
  ~CpuHeap() override {
    munmap(base_, size_);
    held_->fetch_sub(size_, std::memory_order_relaxed);
  }
  size_t size() const noexcept override { return size_; }
  void* host_ptr() const noexcept override { return base_; }

 private:
  void* base_;
  size_t size_;
  std::atomic<uint64_t>* held_;
};

// Maps nbytes of anonymous memory; large regions are 2 MiB-aligned and marked for huge pages
// (a cold first touch runs ~3.5x faster with them). Returns nullptr when the OS refuses.
void* map_region(size_t nbytes) {
  if (nbytes < kHugePage) {
    void* p = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  const size_t span = nbytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t(kHugePage) - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + nbytes;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  void* p = reinterpret_cast<void*>(aligned);
#if defined(MADV_HUGEPAGE)
  madvise(p, nbytes, MADV_HUGEPAGE);
#endif
  return p;
}

uint8_t* host_addr(BufferRef r) {
  return static_cast<uint8_t*>(r.heap->host_ptr()) + r.offset;
}

// Where a recorded command keeps a buffer: its host address (offset included).
struct AtHost {
  using Ptr = uint8_t*;
  static Ptr ptr(BufferRef r) noexcept { return host_addr(r); }
  static size_t off(BufferRef) noexcept { return 0; }
};

// How a device runs its kernels, as measured on the development VMs (see bench_fill_copy.py):
//  - fills below the streaming threshold use ordinary stores: glibc memset for byte patterns,
//    the vector kernels for wider ones; a buffer that fits the caches stays there for the next
//    op (VM with L2 2 MiB, L3 480 MiB: memset 26-27 GB/s up to 64 MiB, NT stores 25);
//  - from the threshold up every fill uses streaming (non-temporal) stores: the data goes to
//    memory anyway, and NT stores skip the read-for-ownership (same VM, 128 MiB - 1 GiB:
//    24 GB/s against memset's 10). The threshold is a quarter of the shared L3 (what a thread
//    can expect to keep of it), at least the L2 size and 1 MiB;
//  - copies go to glibc memcpy, which measured at least as fast as a streaming copy at every
//    size but 64-128 MiB: copies never ask for streaming stores;
//  - a fill or copy runs on one thread (the queue's, or the synchronizing thread's when it
//    runs the work inline: see CpuCommandBuffer::prefers_queue): one thread saturates this VM's
//    memory bandwidth, and splitting an in-cache 16 MiB memset across cores measured slower
//    (64 against 106 GB/s). The pool serves the compute-bound random fills.
struct ExecContext {
  const SimdOps* ops = nullptr;
  ThreadPool* pool = nullptr;
  size_t nt_fill_threshold = 0;
};

void run_fill(const ExecContext& ctx, uint8_t* dst, size_t n, uint64_t pattern) {
  ctx.ops->fill(dst, n, pattern, n >= ctx.nt_fill_threshold);
}

// Random fills are compute-bound (~0.5 ns per word): past kParallelRandomBytes the elements
// are split over the pool in chunks of whole 64-element units (even, for Box-Muller pairs).
constexpr size_t kParallelRandomBytes = size_t(1) << 20;

// A destination not aligned to its element size (a byte view of a Buffer): the elements are
// made in an aligned buffer and copied, in chunks that start on a Philox block (the kernels
// store whole elements). Cost: one extra pass over the bytes; only such views pay it.
void run_random_unaligned(const ExecContext& ctx, uint8_t* dst, const backend::RandomParams& p) {
  constexpr uint64_t kChunk = uint64_t(1) << 14;  // elements: a multiple of 4 (whole blocks)
  const size_t es = dtype_size(p.dtype);
  std::unique_ptr<uint64_t[]> tmp(new uint64_t[kChunk * es / sizeof(uint64_t)]);
  for (uint64_t first = 0; first < p.count; first += kChunk) {
    backend::RandomParams before = p;  // the elements ahead of this chunk: the words they use
    before.count = first;
    backend::RandomParams q = p;
    q.count = std::min(kChunk, p.count - first);
    q.offset = p.offset + backend::random_words(before) / 4;
    ctx.ops->random(reinterpret_cast<uint8_t*>(tmp.get()), q, 0, q.count);
    std::memcpy(dst + first * es, tmp.get(), q.count * es);
  }
}

void run_random(const ExecContext& ctx, uint8_t* dst, const backend::RandomParams& p) {
  const uint64_t n = p.count;
  if (n == 0) return;
  if (MPSRT_UNLIKELY(reinterpret_cast<uintptr_t>(dst) % dtype_size(p.dtype))) {
    run_random_unaligned(ctx, dst, p);
    return;
  }
  const size_t bytes = n * dtype_size(p.dtype);
  if (ctx.pool == nullptr || ctx.pool->helpers() == 0 || bytes < kParallelRandomBytes) {
    ctx.ops->random(dst, p, 0, n);
    return;
  }
  const uint64_t parts = static_cast<uint64_t>(ctx.pool->helpers() + 1) * 4;
  const uint64_t chunk = std::max<uint64_t>(64, (n / parts + 63) / 64 * 64);
  const int count = static_cast<int>((n + chunk - 1) / chunk);
  ctx.pool->run(count, [&](int i) {
    const uint64_t first = static_cast<uint64_t>(i) * chunk;
    ctx.ops->random(dst, p, first, std::min(chunk, n - first));
  });
}

void run_copy(const ExecContext& ctx, uint8_t* dst, const uint8_t* src, size_t n) {
  if (n == 0) return;
  if (!(dst + n <= src || src + n <= dst)) {
    std::memmove(dst, src, n);  // overlapping ranges: order matters, stay serial
    return;
  }
  ctx.ops->copy(dst, src, n, /*nt=*/false);
}

// The recorded commands (backend::Recorder), run by execute().
class CpuCommandBuffer final : public backend::Recorder<AtHost> {
 public:
  // Drops the executed commands (and what their callbacks hold), keeping the signals that
  // execute() left for signal_trailing().
  void release_commands() {
    cmds.erase(cmds.begin(), cmds.begin() + static_cast<std::ptrdiff_t>(trailing_));
    trailing_ = 0;
  }
  /// After release_commands() and the completion callback: sets the signals that end the
  /// command buffer.
  void signal_trailing() {
    for (const Cmd& c : cmds) {
      if (c.kind == Cmd::kSignal) c.event->signal(c.value);
    }
    cmds.clear();
  }
  /// True when the commands should run on the queue's thread rather than inline on a thread
  /// that synchronizes: host callbacks (they are promised a runtime thread), and copies of
  /// kInlineCopyMax bytes or more. A copy reads and writes twice its size; on the queue's core
  /// the cache holds only the copy's lines, and that measured faster than inline on a thread
  /// that runs Python (1 MiB: 44 against 57 us), while fills measured faster inline (no
  /// hand-off: 17.7 against 18.4 us, memset 16.4).
  bool prefers_queue() const {
    for (const Cmd& c : cmds) {
      if (c.kind == Cmd::kCallback) return true;
      if (c.kind == Cmd::kCopy && c.n >= kInlineCopyMax) return true;
    }
    return false;
  }
  static constexpr size_t kInlineCopyMax = size_t(256) << 10;

  // Queue links (see CpuQueue).
  std::atomic<CpuCommandBuffer*> next{nullptr};
  CompletionFn on_done;

  // Runs every command. After a failure the remaining data commands are skipped, but signals,
  // waits and timestamps still run, so that nobody waiting on this work can hang.
  // The signals that end the command buffer are left to signal_trailing(), which the queue
  // calls after the completion callback.
  Completion execute(const ExecContext& ctx) {
    Completion done;
    done.device_start_ns = static_cast<uint64_t>(now_ns());
    trailing_ = backend::trailing_signals(cmds);
    for (size_t i = 0; i < cmds.size(); ++i) {
      Cmd& c = cmds[i];
      const bool failed = !done.error.empty();
      switch (c.kind) {
        case Cmd::kFill:
          if (!failed) run_fill(ctx, c.dst, c.n, c.value);
          break;
        case Cmd::kCopy:
          if (!failed) run_copy(ctx, c.dst, c.src, c.n);
          break;
        case Cmd::kCallback:
          if (failed) break;
          try {
            c.fn();
          } catch (const std::exception& e) {
            done.error = std::string("host callback raised: ") + e.what();
          } catch (...) {
            done.error = "host callback raised an unknown exception";
          }
          break;
        case Cmd::kSignal:
          if (i < trailing_) c.event->signal(c.value);
          break;
        case Cmd::kWait:
          c.event->wait(c.value, -1);
          break;
        case Cmd::kRandom:
          if (!failed) run_random(ctx, c.dst, *c.random);
          break;
        case Cmd::kTimestamp:
          *c.out = static_cast<uint64_t>(now_ns());
          break;
        case Cmd::kDispatch:  // never encoded: the device has no tensor kernels (core checks)
          if (!failed) done.error = "the cpu backend runs no tensor kernels";
          break;
      }
    }
    done.device_end_ns = static_cast<uint64_t>(now_ns());
    return done;
  }

 private:
  size_t trailing_ = 0;  // first of the signals that end the command buffer
};

// One worker thread per queue. Committed command buffers form a lock-free multi-producer
// single-consumer list (Vyukov's intrusive queue: the command buffer is the node). The worker
// spins on the list for spin_ns after its last piece of work, then parks.
class CpuQueue final : public backend::Queue {
 public:
  CpuQueue(ExecContext ctx, int64_t spin_ns, std::string thread_name)
      : ctx_(ctx), spin_ns_(spin_ns), thread_name_(std::move(thread_name)) {
    head_ = new CpuCommandBuffer();  // the list's first stub
    tail_.store(head_, std::memory_order_relaxed);
    thread_ = std::thread([this] { run(); });
  }
  ~CpuQueue() override {
    stop_.store(true, std::memory_order_seq_cst);
    park_.notify();
    thread_.join();
    delete head_;  // the last stub
  }

  std::unique_ptr<backend::CommandBuffer> create_command_buffer() override {
    return std::make_unique<CpuCommandBuffer>();
  }

  // Cost: one atomic exchange and one store to link the node, one load to see whether the
  // worker is parked; a futex wake only when it is.
  void commit(std::unique_ptr<backend::CommandBuffer> cb, CompletionFn on_complete) override {
    auto* node = static_cast<CpuCommandBuffer*>(cb.release());
    node->on_done = std::move(on_complete);
    node->next.store(nullptr, std::memory_order_relaxed);
    CpuCommandBuffer* prev = tail_.exchange(node, std::memory_order_acq_rel);
    prev->next.store(node, std::memory_order_seq_cst);
    park_.notify();
  }

  // Cost: the command buffer's own work, on the caller; no hand-off, no wake-up.
  bool run_inline(std::unique_ptr<backend::CommandBuffer>& cb,
                  const CompletionFn& on_complete) override {
    auto* c = static_cast<CpuCommandBuffer*>(cb.get());
    if (c->prefers_queue()) return false;
    const Completion done = c->execute(ctx_);
    c->release_commands();
    if (on_complete) on_complete(done);
    c->signal_trailing();
    cb.reset();
    return true;
  }

 private:
  bool has_work() const { return head_->next.load(std::memory_order_acquire) != nullptr; }

  void run() {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), thread_name_.substr(0, 15).c_str());
#endif
    for (;;) {
      park_.wait([&] { return has_work() || stop_.load(std::memory_order_acquire); }, spin_ns_, -1);
      // Drain: each node executes in place and then serves as the list's stub.
      while (CpuCommandBuffer* next = head_->next.load(std::memory_order_acquire)) {
        delete head_;
        head_ = next;
        const Completion c = next->execute(ctx_);
        CompletionFn done = std::move(next->on_done);
        next->release_commands();
        if (done) done(c);
        next->signal_trailing();
      }
      if (stop_.load(std::memory_order_acquire) && !has_work()) {
        // A producer may be between its exchange and its link store: wait for the link.
        if (tail_.load(std::memory_order_acquire) == head_) return;
      }
    }
  }

  ExecContext ctx_;
  int64_t spin_ns_;
  std::string thread_name_;
  CpuCommandBuffer* head_;  // consumer side; worker only
  alignas(64) std::atomic<CpuCommandBuffer*> tail_{nullptr};
  std::atomic<bool> stop_{false};
  ParkWord park_;
  std::thread thread_;
};

class CpuDevice final : public backend::Device {
 public:
  CpuDevice(int index, const CpuConfig& cfg, Isa isa, std::shared_ptr<ThreadPool> pool)
      : index_(index), cfg_(cfg), pool_(std::move(pool)) {
    info_.name = cpu_model_name();
    info_.total_memory = usable_memory_bytes();
    // The share Metal recommends on Apple silicon: three quarters of the memory.
    info_.recommended_max_memory = info_.total_memory / 4 * 3;
    info_.max_buffer_size = info_.total_memory;
    info_.unified_memory = true;
    info_.timestamp_period_ns = 1.0;
    ctx_.ops = &simd_ops_for(isa);
    info_.details = std::string("kernels=") + isa_name(isa);
    info_.cpu_type = true;
    ctx_.pool = pool_.get();
    ctx_.nt_fill_threshold = std::max({l2_cache_bytes(), l3_cache_bytes() / 4, size_t(1) << 20});
  }
  const backend::DeviceInfo& info() const noexcept override { return info_; }

  std::unique_ptr<backend::Heap> create_heap(size_t nbytes) override {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t size = (std::max<size_t>(nbytes, 1) + page - 1) / page * page;
    if (size >= kHugePage) size = (size + kHugePage - 1) / kHugePage * kHugePage;
    if (size < nbytes) return nullptr;  // overflow
    void* p = map_region(size);
    if (p == nullptr) return nullptr;
    return std::make_unique<CpuHeap>(p, size, &held_);
  }
  uint64_t driver_allocated_bytes() const noexcept override {
    return held_.load(std::memory_order_relaxed);
  }
  std::unique_ptr<backend::Queue> create_queue(int priority) override {
    (void)priority;  // the OS scheduler decides; all queues are equal on cpu
    const int q = next_queue_.fetch_add(1);
    return std::make_unique<CpuQueue>(ctx_, cfg_.spin_ns,
                                      "mpsrt-c" + std::to_string(index_) + "q" + std::to_string(q));
  }
  std::unique_ptr<backend::TimelineEvent> create_event() override {
    return std::make_unique<CpuEvent>(cfg_.spin_ns);
  }

 private:
  int index_;
  CpuConfig cfg_;
  std::shared_ptr<ThreadPool> pool_;
  backend::DeviceInfo info_;
  ExecContext ctx_{};
  std::atomic<uint64_t> held_{0};
  std::atomic<int> next_queue_{0};
};

Isa parse_isa(const std::string& name) {
  if (name == "auto") return best_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (name != isa_name(isa)) continue;
    if (!isa_supported(isa)) {
      std::string ok;
      for (Isa o : {Isa::Avx512, Isa::Avx2, Isa::Scalar}) {
        if (isa_supported(o)) ok += std::string(ok.empty() ? "" : ", ") + isa_name(o);
      }
      detail::throw_invalid("[cpu] MPSRT_CPU_ISA=" + name +
                            " is not supported by this CPU or build; use one of: auto, " + ok);
    }
    return isa;
  }
  detail::throw_invalid("[cpu] MPSRT_CPU_ISA=" + name +
                        " is not an instruction set; use auto, avx512, avx2 or scalar");
}

class CpuBackend final : public backend::Backend {
 public:
  const char* name() const noexcept override { return "cpu"; }
  void configure(const CpuConfig& config) {
    // Validate everything first: a configure() that throws changes nothing.
    const Isa isa = parse_isa(config.isa);
    if (config.devices < 1) detail::throw_invalid("[cpu] the device count must be >= 1");
    isa_ = isa;
    cfg_ = config;
  }
  void configure(const backend::Settings& s) override {
    CpuConfig c;
    c.devices = static_cast<int>(s.integer("MPSRT_CPU_DEVICES"));
    c.spin_ns = s.integer("MPSRT_CPU_SPIN_US") * 1000;
    c.isa = s.text("MPSRT_CPU_ISA");
    c.threads = static_cast<int>(s.integer("MPSRT_CPU_THREADS"));
    configure(c);
  }
  bool is_built() const noexcept override { return true; }
  void after_fork_child() noexcept override {
    // The shared kernel thread pool's threads stayed in the parent: new devices make a new one.
    // Single-threaded here; the lock is made anew, since a parent thread may have held it.
    new (&mu_) std::mutex;
    pool_.reset();
  }
  bool is_available() noexcept override { return true; }
  std::string unavailable_reason() override { return ""; }
  int device_count() override { return cfg_.devices; }
  std::unique_ptr<backend::Device> open_device(int index) override {
    // One pool for all devices of the process: they share the same cores.
    std::shared_ptr<ThreadPool> pool;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pool = pool_.lock();
      if (!pool) {
        const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
        const unsigned threads =
            cfg_.threads > 0 ? static_cast<unsigned>(cfg_.threads) : std::min(hw, 8u);
        pool = std::make_shared<ThreadPool>(static_cast<int>(threads) - 1, cfg_.spin_ns);
        pool_ = pool;
      }
    }
    return std::make_unique<CpuDevice>(index, cfg_, isa_, std::move(pool));
  }

 private:
  std::mutex mu_;
  std::weak_ptr<ThreadPool> pool_;
  CpuConfig cfg_;
  Isa isa_ = best_isa();
};

CpuBackend& the_backend() {
  static CpuBackend b;
  return b;
}

}  // namespace

void configure(const CpuConfig& config) {
  the_backend().configure(config);
}

}  // namespace mpsrt::cpu

namespace mpsrt::backend {
Backend& cpu_backend() {
  return cpu::the_backend();
}
}  // namespace mpsrt::backend
