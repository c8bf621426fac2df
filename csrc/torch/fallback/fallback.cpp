// The boxed fallback of the mpsrt device: every aten operator without a kernel of its own runs
// its CPU kernel on CPU tensors aliasing the device memory (zero-copy for inputs and for outputs
// that alias inputs; new outputs are allocated in mpsrt memory by the kernel itself, through
// CaptureAllocator), after the current stream's queued work. Device arguments naming mpsrt
// (factory ops) are run on cpu. A random op's generator (None or an mpsrt generator) becomes a
// CPU generator seeded from the mpsrt generator. In a profiler session the op is an interval
// named after it on the current stream's track. On discrete memory (not host-visible) each
// mpsrt tensor argument is staged instead: the kernel runs on a host copy of the bytes it spans
// (read through mpsrt's staging path), the copies of written arguments are written back, new
// outputs are copied into the device; never a CPU kernel over device memory. Such a fallback
// warns once per op (it moves its tensors over the bus). Every op run here is counted by name
// (torch.mpsrt.fallback_counts()).
//
// One call (cpu_fallback), in phases:
//   1. alias_arguments: mpsrt tensors (alone or in lists) become CPU aliases (or staged host
//      copies) and mpsrt devices cpu; finds the device the op runs for and its generator
//      argument;
//   2. replace_generator: that generator becomes a CPU generator seeded from the mpsrt one;
//   3. run_cpu_kernel: the CPU kernel, in stream order, its new outputs in mpsrt memory;
//   4. write_back: written arguments that the kernel resized or restrided are mirrored, staged
//      ones written back;
//   5. Returns::to_device: the returns become mpsrt tensors (views, adopted memory or copies).
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/smooth_l1_loss_ops.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/allocator.h"
#include "device/generator.h"
#include "device/host_access.h"
#include "device/runtime_client.h"
#include "fallback/fallback.h"
#include "fallback/pointer_table.h"
#include "ops/register.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue {
namespace {

// ------------------------------------------------------------------ capturing new outputs
// CPU allocations made by a CPU kernel the fallback runs come from mpsrt's caching allocator
// (host-visible memory), so that a new output already lies in device memory and becomes the
// mpsrt tensor without a copy. Only on the thread running the kernel, only while it runs:
// c10's CPU allocator is replaced once by this one, which hands every other allocation to the
// allocator it replaced.

// Small host allocations: torch makes a CPU tensor of each Python number an op is called with
// (`t.add_(1)` allocates 8 bytes), so every such call costs the base allocator's aligned
// allocation and free (a fifth of the call on mpsrt's kernels). Blocks of up to kSmallBytes come
// from a per-thread cache of kSmallBytes-byte blocks (kSmallAlign-aligned, as torch's CPU
// allocations are) of at most kSmallCached blocks; a freed block goes back to the freeing
// thread's cache, or to free() when that is full or the thread is exiting. With torch's memory
// profiler on (profile_memory), every allocation goes to the base allocator, which reports it.
constexpr size_t kSmallBytes = 64;
constexpr size_t kSmallAlign = 64;
constexpr int kSmallCached = 64;

// The calling thread's state here, in one object that is constant-initialised and trivially
// destructible (a thread_local with a constructor or destructor costs a guard call per use, each
// a dynamic TLS look-up in a library loaded at run time): the device whose CPU kernel
// allocations are captured (-1: none) and the small blocks' cache. The cache's blocks are freed
// at thread exit by t_small_reaper, set up when the thread caches its first block; after that
// `small_gone` sends every block to free().
struct ThreadState {
  int capture_device = -1;
  int small_n = 0;
  bool small_gone = false;
  bool small_reaped = false;  // t_small_reaper is set up
  void* small[kSmallCached] = {};
};
thread_local ThreadState t_state;

struct SmallReaper {
  bool armed = false;
  ~SmallReaper() {
    ThreadState& t = t_state;
    t.small_gone = true;
    for (int i = 0; i < t.small_n; ++i) std::free(t.small[i]);
    t.small_n = 0;
  }
};
thread_local SmallReaper t_small_reaper;

std::atomic<int64_t> g_outputs_adopted{0}, g_outputs_copied{0}, g_arguments_staged{0};

}  // namespace

// The ops run here, by name ("aten::add.Tensor"): runs since the process started (their sum is
// fallback_counts()' first: one count per run) and at the last reset, and whether the op
// has warned (once per process) of a staged run. One entry per op, never freed; the boxed
// fallback's thread finds an op's entry through its own cache, keyed by the op's schema object
// (stable while the op is registered) and checked against the op's name (a schema freed and
// another registered at its address is looked up again): no lock and no string per call; a
// typed entry finds its op's once (op_count_of).
struct OpCount {
  explicit OpCount(c10::OperatorName n) : name(std::move(n)) {}
  const c10::OperatorName name;
  std::atomic<int64_t> runs{0};      // since the process started (fallback_counts' first)
  std::atomic<int64_t> at_reset{0};  // runs at the last reset_fallback_counts()
  std::atomic<bool> warned{false};
};

namespace {

struct OpCounts {
  std::mutex mu;
  std::unordered_map<c10::OperatorName, std::unique_ptr<OpCount>> by_name;
};
OpCounts& op_counts() {
  static auto* counts = new OpCounts;  // never destroyed: ops may run during exit
  return *counts;
}

std::string op_name(const c10::FunctionSchema& schema) {
  return schema.overload_name().empty() ? schema.name()
                                        : schema.name() + "." + schema.overload_name();
}

OpCount& op_count_named(const c10::OperatorName& name) {
  OpCounts& c = op_counts();
  std::lock_guard<std::mutex> lock(c.mu);
  auto& entry = c.by_name[name];
  if (!entry) entry = std::make_unique<OpCount>(name);
  return *entry;
}

OpCount& op_count(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpCount*> cache;
  OpCount*& hit = cache[&schema];
  if (C10_LIKELY(hit != nullptr && hit->name == schema.operator_name())) return *hit;
  hit = &op_count_named(schema.operator_name());
  return *hit;
}

// Counts one run of the op; true the first time it ran staged (the caller warns).
bool count_op(const c10::FunctionSchema& schema, bool staged) {
  OpCount& e = op_count(schema);
  e.runs.fetch_add(1, std::memory_order_relaxed);
  return staged && !e.warned.exchange(true);
}

// The CPU allocator while a CPU kernel runs for the fallback: on the op's device, its new
// allocations are mpsrt memory (host-visible), which the returns then adopt without a copy.
// A DataPtr's context is its pointer, as torch's CPU allocations have it (Allocator::
// raw_allocate asserts it: oneDNN's scratch memory comes that way); the mpsrt buffer behind a
// pointer is in g_captured until the memory is freed or adopted.
//
// The table: every captured allocation puts its pointer in and takes it out again (adopted as
// an output, or freed: a kernel's temporaries), on any thread, so it takes no lock
// (pointer_table.h).
PointerTable<MpsrtBuffer, 1024, 16> g_captured;

MpsrtBuffer* take_captured(void* p) {
  return g_captured.take(p);
}

void free_captured(void* p);

void free_small(void* p) {
  ThreadState& t = t_state;
  if (!t.small_gone && t.small_n < kSmallCached) {
    if (C10_UNLIKELY(!t.small_reaped)) {
      t_small_reaper.armed = true;  // its first use registers its destructor
      t.small_reaped = true;
    }
    t.small[t.small_n++] = p;
    return;
  }
  std::free(p);
}

void* alloc_small(ThreadState& t) {
  if (!t.small_gone && t.small_n > 0) return t.small[--t.small_n];
  void* p = nullptr;
  return posix_memalign(&p, kSmallAlign, kSmallBytes) == 0 ? p : nullptr;
}

struct CaptureAllocator final : c10::Allocator {
  c10::Allocator* base = nullptr;
  c10::DataPtr allocate(size_t nbytes) override {
    ThreadState& t = t_state;
    const int d = t.capture_device;
    // Small blocks come from the per-thread cache in a CPU kernel's run too: there they are
    // mostly its temporaries (the Python number of `t.add_(1)` converted to the tensor's dtype
    // by TensorIterator), which mpsrt memory would make cost an allocation, a free and two
    // table look-ups each. A small new output is copied into the device (64
    // bytes at most) by host_output.
    if (nbytes > 0 && nbytes <= kSmallBytes && !c10::memoryProfilingEnabled()) {
      if (void* p = alloc_small(t)) return {p, p, &free_small, c10::Device(c10::kCPU)};
    }
    if (d >= 0 && nbytes > 0 && g_api != nullptr) {
      MpsrtBuffer* b = nullptr;
      void* host = nullptr;
      if (g_api->buffer_alloc(nbytes, d, &b, &host) == MPSRT_OK) {
        if (host != nullptr) {
          g_captured.put(host, b);
          return {host, host, &free_captured, c10::Device(c10::kCPU)};
        }
        g_api->buffer_free(b);
      }
      // Out of device memory (or not host-visible): the kernel's allocation goes to the host;
      // the fallback copies such an output into the device, where its own allocation reports
      // the out-of-memory error torch expects.
    }
    return base->allocate(nbytes);
  }
  // raw_deallocate of either kind of memory (free_captured hands the host's to base's).
  c10::DeleterFnPtr raw_deleter() const override { return &free_captured; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
CaptureAllocator g_capture;

void free_captured(void* p) {
  if (MpsrtBuffer* b = take_captured(p)) {
    free_buffer(b);
  } else if (p != nullptr) {
    g_capture.base->raw_deleter()(p);  // raw_allocate'd by the base allocator
  }
}

struct CaptureScope {
  int previous;
  explicit CaptureScope(int device) : previous(t_state.capture_device) {
    t_state.capture_device = device;
  }
  ~CaptureScope() { t_state.capture_device = previous; }
};

// ------------------------------------------------------------------ 1. the arguments
struct Aliased {
  at::Tensor original;
  at::Tensor alias;
  bool written;
  // Discrete memory: `alias` views `host`, a host copy of the original's device storage from
  // byte `lo` (the storage's copy that every argument on it shares, not resizable, or, for a
  // tensor without elements, an empty one of its own with `lo` its first element's byte, which a
  // kernel resizing an out= argument grows).
  bool staged = false;
  c10::Storage host;
  size_t lo = 0;
  size_t host_nbytes = 0;  // host's size when staged: a different size now means it was resized
};

// Discrete memory: one host copy per device storage that the op's tensors are on, of the bytes
// they span together (from `lo`, 16-byte aligned so that every dtype's elements fall on their
// own size, to `hi`), read when its first tensor is replaced; every tensor on the storage views
// it, so the kernel sees their overlaps as the device memory has them, and the copy is written
// back once when any of them is written.
struct StagedStorage {
  const c10::StorageImpl* impl = nullptr;
  size_t lo = 0;
  size_t hi = 0;
  int tensors = 0;  // the op's tensors on it
  HostSpan copy;
  bool read = false;
  bool written = false;
};

// What alias_arguments found.
struct Arguments {
  std::vector<Aliased> seen;          // the mpsrt tensors and their aliases, in argument order
  std::vector<StagedStorage> staged;  // discrete memory: the host copies of their storages
  std::optional<c10::Device> device;  // the device the op runs for (the last mpsrt one seen)
  int generator_arg = -1;             // a generator argument that is None or an mpsrt generator
};

// Widens the span of t's storage's host copy to t's bytes (discrete memory only).
void note_span(const at::Tensor& t, std::vector<StagedStorage>& staged) {
  if (!is_mpsrt(t) || t.numel() == 0 || host_visible(t.storage())) return;
  const size_t item = t.dtype().itemsize();
  const size_t lo = static_cast<size_t>(t.storage_offset()) * item / 16 * 16;
  // (within the storage: a packed quantized dtype's elements are not whole bytes)
  const size_t hi =
      std::min(at::detail::computeStorageNbytes(t.sizes(), t.strides(), item, t.storage_offset()),
               t.storage().nbytes());
  const auto* impl = t.storage().unsafeGetStorageImpl();
  for (auto& g : staged) {
    if (g.impl == impl) {
      g.lo = std::min(g.lo, lo);
      g.hi = std::max(g.hi, hi);
      ++g.tensors;
      return;
    }
  }
  staged.push_back({impl, lo, hi, 1, {}, false, false});
}

// A CPU tensor with t's sizes and strides over `host` from byte `start` (which holds them: the
// whole device storage's alias, or the host copy of the span they lie in).
at::Tensor view_of_host(const at::Tensor& t, const c10::Storage& host, size_t start) {
  at::Tensor a = make_over(host, t, On::kCpu);
  a.unsafeGetTensorImpl()->set_sizes_and_strides(
      t.sizes(), t.strides(), static_cast<int64_t>(start / t.dtype().itemsize()));
  return a;
}

// t's stand-in for the CPU kernel: an alias of its memory where the host addresses it (the
// tensors of one device storage alias one CPU storage, so that the CPU kernel sees what overlaps:
// torch's "single memory location" checks), else a view of its storage's host copy (read here on
// first use). A tensor given twice has one stand-in, so that the kernel sees the same tensor
// where it was given the same (kernels test it: e.g. multi-head attention's q, k and v, one
// projection for self-attention).
at::Tensor alias_arg(const at::Tensor& t, bool written, Arguments& found) {
  for (Aliased& s : found.seen) {
    if (s.original.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
      s.written = s.written || written;
      if (s.staged && written)  // its storage's host copy is written back
        for (auto& g : found.staged)
          if (g.impl == t.storage().unsafeGetStorageImpl()) g.written = true;
      return s.alias;
    }
  }
  if (host_visible(t.storage())) {
    for (const Aliased& s : found.seen) {
      if (!s.staged && s.original.storage().is_alias_of(t.storage())) {
        at::Tensor a = view_of_host(t, s.alias.storage(),
                                    static_cast<size_t>(t.storage_offset()) * t.dtype().itemsize());
        found.seen.push_back({t, a, written});
        return a;
      }
    }
    auto a = cpu_alias(t);
    found.seen.push_back({t, a, written});
    return a;
  }
  const size_t start = static_cast<size_t>(t.storage_offset()) * t.dtype().itemsize();
  StagedStorage* g = nullptr;
  for (auto& s : found.staged)
    if (s.impl == t.storage().unsafeGetStorageImpl() && t.numel() > 0) g = &s;
  if (g == nullptr) {  // no elements: an empty host storage of its own
    c10::Storage host = at::empty({0}, c10::TensorOptions().dtype(at::kByte)).storage();
    at::Tensor a = view_of_host(t, host, 0);
    found.seen.push_back({t, a, written, true, host, start, 0});
    return a;
  }
  if (!g->read) {
    // An out= argument alone on its storage may be resized by the kernel (torch resizes one of
    // another size, with a warning): its copy grows, and write_back_staged resizes the tensor.
    g->copy = read_storage_bytes(t.storage(), g->lo, g->hi, written && g->tensors == 1);
    g->read = true;
    g_arguments_staged.fetch_add(1, std::memory_order_relaxed);
  }
  g->written = g->written || written;
  const c10::Storage& host = g->copy.bytes.storage();
  at::Tensor a = view_of_host(t, host, start - g->lo);
  found.seen.push_back({t, a, written, true, host, g->lo, host.nbytes()});
  return a;
}

// The mpsrt tensor in a list item, or nullptr.
const at::Tensor* mpsrt_item(const at::Tensor& t) {
  return is_mpsrt(t) ? &t : nullptr;
}
const at::Tensor* mpsrt_item(const std::optional<at::Tensor>& t) {
  return t && is_mpsrt(*t) ? &*t : nullptr;
}

// A Tensor[] or Tensor?[] argument with its mpsrt tensors replaced by aliases.
template <class T>
c10::List<T> alias_list(c10::List<T> list, bool written, Arguments& found) {
  for (size_t j = 0; j < list.size(); ++j) {
    const T item = list[j];
    if (const at::Tensor* t = mpsrt_item(item)) {
      found.device = t->device();
      list[j] = alias_arg(*t, written, found);
    }
  }
  return list;
}

bool is_generator_arg(const c10::Argument& a) {
  const auto& t = a.type();
  if (t->kind() == c10::TypeKind::GeneratorType) return true;
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// Whether the op writes its argument number `index`: as its schema says (Tensor(a!)), or where
// the schema does not say it: native_batch_norm updates its running_mean and running_var
// (arguments 3 and 4) in training, though they are plain Tensor? (torch keeps the schema;
// _native_batch_norm_legit is the annotated one). Without this, on discrete memory their staged
// copies were not written back and BatchNorm's running statistics stayed as they were.
bool writes_argument(const c10::FunctionSchema& schema, const c10::Argument& arg, size_t index) {
  if (arg.alias_info() && arg.alias_info()->isWrite()) return true;
  return (index == 3 || index == 4) && schema.name() == "aten::native_batch_norm" &&
         schema.overload_name().empty();
}

// One argument (the stack's value `iv` for the schema's argument `arg`, number `index`).
void alias_argument(c10::IValue& iv, const c10::Argument& arg, size_t index, bool written,
                    Arguments& found) {
  if (iv.isTensor()) {
    const auto& t = iv.toTensor();
    if (is_mpsrt(t)) {
      found.device = t.device();
      iv = alias_arg(t, written, found);
    }
  } else if (iv.isTensorList()) {
    iv = alias_list(iv.toTensorList(), written, found);
  } else if (iv.isOptionalTensorList()) {
    iv = alias_list(iv.toOptionalTensorList(), written, found);
  } else if (iv.isDevice() && iv.toDevice().type() == kDev) {
    found.device = iv.toDevice();
    iv = c10::IValue(c10::Device(c10::kCPU));
  } else if ((iv.isNone() || (iv.isGenerator() && iv.toGenerator().device().type() == kDev)) &&
             is_generator_arg(arg)) {
    found.generator_arg = static_cast<int>(index);
  }
}

Arguments alias_arguments(const c10::FunctionSchema& schema, torch::jit::Stack& stack,
                          size_t begin) {
  Arguments found;
  const auto& args = schema.arguments();
  found.seen.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& iv = stack[begin + i];
    if (iv.isTensor()) {
      note_span(iv.toTensor(), found.staged);
    } else if (iv.isTensorList()) {
      for (const at::Tensor t : iv.toTensorList()) note_span(t, found.staged);
    } else if (iv.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : iv.toOptionalTensorList())
        if (t) note_span(*t, found.staged);
    }
  }
  for (size_t i = 0; i < args.size(); ++i)
    alias_argument(stack[begin + i], args[i], i, writes_argument(schema, args[i], i), found);
  return found;
}

// ------------------------------------------------------------------ 2. the generator
void replace_generator(c10::IValue& iv, c10::DeviceIndex d) {
  std::optional<at::Generator> g;
  if (iv.isGenerator()) g = iv.toGenerator();
  iv = c10::IValue(cpu_generator_from(generator_for(g, c10::Device(kDev, d))));
}

// ------------------------------------------------------------------ 3. the CPU kernel
// After the current stream's queued work; in a profiler session an interval named after the op.
// The op's CPU kernel is called directly (redispatched to the CPU key): the op was already
// recorded once, as the device's (torch's profiler would otherwise show it twice, the CPU row
// the device row's only child, which its event list merges into one without the device time),
// and the CPU tensors standing in for the arguments need none of the keys above CPU (no
// autograd, no CPU autocast: the op is the device's).
// New outputs go straight into mpsrt memory where the host addresses it: when the op's mpsrt
// arguments were aliased (none staged), or, for a factory op with none, when the device's memory
// is host-visible.
// The CPU kernels' key: QuantizedCPU for a quantized call, else CPU.
c10::DispatchKeySet cpu_keys(bool quantized) {
  return c10::DispatchKeySet(quantized ? c10::DispatchKey::QuantizedCPU : c10::DispatchKey::CPU);
}

void run_cpu_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    const std::vector<Aliased>& seen, c10::DeviceIndex d, bool quantized) {
  MpsrtStream* stream = current_stream(d);
  check(api().stream_synchronize(stream));
  const int64_t t0 = api().host_op_begin();
  {
    bool staged = false;
    for (const auto& a : seen) {
      staged = staged || a.staged;
      quantized = quantized || a.alias.is_quantized();  // quantized arguments: QuantizedCPU
    }
    const bool capture = !staged && (!seen.empty() || api().host_visible(d) == 1);
    const CaptureScope scope(capture ? d : -1);
    op.redispatchBoxed(cpu_keys(quantized), stack);
  }
  if (t0 != 0) api().host_op_end(op.schema().name().c_str(), stream, t0);
}

// ------------------------------------------------------------------ 4. written arguments
// After a CPU kernel wrote an alias of an mpsrt out= argument: if it resized it into CPU
// memory, grow the mpsrt tensor and copy the result in; if it changed its geometry, mirror it.
void write_back_staged(const Aliased& a);

void write_back(const Aliased& a) {
  if (a.staged) {
    write_back_staged(a);
    return;
  }
  auto* oimpl = a.original.unsafeGetTensorImpl();
  const void* abase = a.alias.storage().data();
  if (abase == a.original.storage().data()) {
    if (a.alias.sizes() != a.original.sizes() || a.alias.strides() != a.original.strides() ||
        a.alias.storage_offset() != a.original.storage_offset())
      oimpl->set_sizes_and_strides(a.alias.sizes(), a.alias.strides(), a.alias.storage_offset());
    return;
  }
  resize_(a.original, a.alias.sizes(), std::nullopt);
  oimpl->set_sizes_and_strides(a.alias.sizes(), a.alias.strides(), 0);
  if (!a.original.is_non_overlapping_and_dense()) oimpl->set_sizes_contiguous(a.alias.sizes());
  if (host_visible(a.original.storage())) {
    cpu_alias(a.original).copy_(a.alias);
  } else {
    // Discrete memory: an out= argument that had no bytes (so it could be aliased) and that the
    // kernel grew into host memory: staged in.
    write_values(a.original, a.alias);
  }
}

// A staged argument (discrete memory), after its storage's host copy was written back: a new
// geometry within the copy is mirrored (offsets counted from the copy's first byte); an alias
// the kernel resized (its copy grown, or moved into other memory) is written into the mpsrt
// tensor, resized likewise (from its own first element, as torch's resize_ keeps the offset).
void write_back_staged(const Aliased& a) {
  auto* oimpl = a.original.unsafeGetTensorImpl();
  const bool in_copy = a.alias.storage().unsafeGetStorageImpl() == a.host.unsafeGetStorageImpl();
  if (in_copy && a.host.nbytes() == a.host_nbytes) {
    const size_t item = a.alias.dtype().itemsize();
    const auto offset = static_cast<int64_t>((a.lo + a.alias.storage_offset() * item) / item);
    if (a.alias.sizes() != a.original.sizes() || a.alias.strides() != a.original.strides() ||
        offset != a.original.storage_offset())
      oimpl->set_sizes_and_strides(a.alias.sizes(), a.alias.strides(), offset);
    return;
  }
  resize_(a.original, a.alias.sizes(), std::nullopt);
  oimpl->set_sizes_and_strides(a.alias.sizes(), a.alias.strides(),
                               in_copy ? a.original.storage_offset() : 0);
  if (!a.original.is_non_overlapping_and_dense()) oimpl->set_sizes_contiguous(a.alias.sizes());
  write_values(a.original, a.alias);
}

// ------------------------------------------------------------------ 5. the returns
// A return that views a staged argument's host copy: the same view of the argument's device
// storage (the copy starts at its byte `lo`); nullopt when an element would straddle it.
std::optional<at::Tensor> staged_view(const at::Tensor& r, const Aliased& a) {
  const size_t item = r.dtype().itemsize();
  if (a.lo % item != 0) return std::nullopt;
  at::Tensor v = view_on(a.original.storage(), r, a.original.key_set());
  v.unsafeGetTensorImpl()->set_sizes_and_strides(
      r.sizes(), r.strides(), r.storage_offset() + static_cast<int64_t>(a.lo / item));
  return v;
}

// A return that is (a view of) an argument's alias: the argument itself when the op returns it,
// as in-place and out= ops do, else a view of the argument's device storage. nullopt when it is
// none, or when the kernel moved that alias into CPU memory.
std::optional<at::Tensor> argument_return(const at::Tensor& r, const std::vector<Aliased>& seen) {
  for (const auto& a : seen) {
    if (r.unsafeGetTensorImpl() == a.alias.unsafeGetTensorImpl()) return a.original;
    if (a.staged) {
      if (r.storage().unsafeGetStorageImpl() == a.host.unsafeGetStorageImpl() &&
          a.host.nbytes() == a.host_nbytes)
        return staged_view(r, a);
      continue;
    }
    if (r.storage().unsafeGetStorageImpl() != a.alias.storage().unsafeGetStorageImpl()) continue;
    if (a.alias.storage().data() != a.original.storage().data()) return std::nullopt;
    return view_on(a.original.storage(), r, a.original.key_set());
  }
  return std::nullopt;
}

// A new CPU output in host memory, copied into a new mpsrt tensor on device d.
at::Tensor copied_to_device(const at::Tensor& r, c10::DeviceIndex d) {
  g_outputs_copied.fetch_add(1, std::memory_order_relaxed);
  if (r.is_quantized()) {
    // A quantized output: its storage's bytes into a new device storage, under a tensor with
    // its geometry and quantizer (a quantized tensor has no empty_strided to make it).
    const size_t nbytes = r.storage().nbytes();
    const at::Tensor bytes =
        new_empty({static_cast<int64_t>(nbytes)}, at::kByte, c10::Device(kDev, d));
    if (nbytes > 0) {
      size_t off = 0;
      MpsrtBuffer* b = buffer_of(bytes, &off);
      TORCH_CHECK(b != nullptr, "[torch] a new device storage is not mpsrt memory");
      check(api().buffer_copy_from_host(b, off, r.storage().data(), nbytes));
    }
    at::Tensor out = make_over(bytes.storage(), r, On::kDevice);
    out.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
    return out;
  }
  // Both allocate on device d under their own device guard.
  at::Tensor out = r.is_non_overlapping_and_dense()
                       ? empty_strided(r.sizes(), r.strides(), r.scalar_type(), std::nullopt,
                                       c10::Device(kDev, d), std::nullopt)
                       : empty_memory_format(r.sizes(), r.scalar_type(), std::nullopt,
                                             c10::Device(kDev, d), std::nullopt, std::nullopt);
  if (r.numel() > 0) {
    if (host_visible(out.storage())) {
      cpu_alias(out).copy_(r);
    } else {
      write_values(out, r);  // discrete memory: staged
    }
  }
  return out;
}

// An mpsrt tensor with r's geometry over the device storage `st` that r's memory was handed to.
at::Tensor adopted_tensor(const at::Tensor& r, const c10::Storage& st) {
  // Not a view (no base): the constructor that adds autograd's keys for the backend.
  at::Tensor out = make_over(st, r, On::kDevice);
  out.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
  keep_stand_in(out, r);  // r, now over the device storage's memory without owning it
  g_outputs_adopted.fetch_add(1, std::memory_order_relaxed);
  return out;
}

// r's memory as a device storage on device d, when it is mpsrt memory captured for a new output
// and nothing but its `holders` tensors (the ones handed over) holds its CPU storage; nullopt
// otherwise.
std::optional<c10::Storage> adopt_storage(const at::Tensor& r, c10::DeviceIndex d, size_t holders) {
  auto* simpl = r.storage().unsafeGetStorageImpl();
  const auto& dp = r.storage().data_ptr();
  if (dp.get_deleter() != &free_captured || r.storage().data() == nullptr) return std::nullopt;
  if (static_cast<size_t>(r.storage().use_count()) != holders) return std::nullopt;
  // r keeps the address without owning it: it becomes the new tensor's stand-in.
  c10::DataPtr taken = simpl->set_data_ptr(c10::DataPtr(dp.get(), c10::Device(c10::kCPU)));
  void* host = taken.release_context();  // its buffer is now the device storage's
  MpsrtBuffer* b = take_captured(host);
  return c10::Storage(c10::Storage::use_byte_size_t(), simpl->nbytes(),
                      c10::DataPtr(host, b, &free_buffer, c10::Device(kDev, d)),
                      &device_allocator(), /*resizable=*/true);
}

// The op's returns on the stack made mpsrt tensors on device d: an alias of an argument becomes
// that argument or a view of its device storage (argument_return); a new output in mpsrt
// memory becomes an mpsrt tensor over that memory (its storage handed over, shared by every
// return that views it); anything else (host memory) is copied into a new mpsrt tensor.
class Returns {
 public:
  Returns(torch::jit::Stack& stack, size_t count, const std::vector<Aliased>& seen,
          c10::DeviceIndex d)
      : stack_(stack), count_(count), begin_(stack.size() - count), seen_(seen), d_(d) {}

  void to_device() {
    for (size_t i = 0; i < count_; ++i) {
      auto& iv = stack_[begin_ + i];
      if (iv.isTensor()) {
        iv = on_device(iv.toTensor());
      } else if (iv.isTensorList()) {
        auto list = iv.toTensorList();
        for (size_t j = 0; j < list.size(); ++j) list[j] = on_device(list[j]);
        iv = list;
      }
    }
  }

 private:
  at::Tensor on_device(const at::Tensor& r) {
    if (!r.defined() || !r.device().is_cpu()) return r;
    if (auto arg = argument_return(r, seen_)) return *arg;
    if (auto st = adopt(r)) return adopted_tensor(r, *st);
    return copied_to_device(r, d_);
  }

  // The returns that hold the storage `simpl`.
  size_t holders(const c10::StorageImpl* simpl) const {
    size_t n = 0;
    for (size_t i = 0; i < count_; ++i) {
      const auto& iv = stack_[begin_ + i];
      if (iv.isTensor() && iv.toTensor().defined() &&
          iv.toTensor().storage().unsafeGetStorageImpl() == simpl)
        ++n;
    }
    return n;
  }

  // r's memory as a device storage, when it is mpsrt memory that only the returns hold (the
  // same storage for every return over it); nullopt otherwise.
  std::optional<c10::Storage> adopt(const at::Tensor& r) {
    auto* simpl = r.storage().unsafeGetStorageImpl();
    for (const auto& [k, v] : adopted_)
      if (k == simpl) return v;
    auto st = adopt_storage(r, d_, holders(simpl));
    if (st) adopted_.emplace_back(simpl, *st);
    return st;
  }

  torch::jit::Stack& stack_;
  const size_t count_;
  const size_t begin_;
  const std::vector<Aliased>& seen_;
  const c10::DeviceIndex d_;
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> adopted_;
};

}  // namespace

// ------------------------------------------------------------------ the fallback
namespace {

// The fallback for the device's plain (PrivateUse1) or quantized (QuantizedPrivateUse1) key: a
// quantized call (a quantized tensor among the arguments, or a factory of a quantized dtype)
// runs the QuantizedCPU kernel.
void run_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool quantized) {
  const auto& schema = op.schema();
  // An op torch implements for accelerators only (no CPU kernel, no composite one): torch's own
  // error would name the CPU backend, which the caller never asked for. Ops of that kind with a
  // decomposition in torch._decomp have one registered as their mpsrt kernel (mpsrt/torch/
  // _decomp.py) and the fused RNN cells their compositions (rnn_ops.cpp), so they do not come
  // here.
  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU) ||
          op.hasComputedKernelForDispatchKey(c10::DispatchKey::QuantizedCPU),
      "[torch] ", op_name(schema),
      " has no kernel on the mpsrt device, and the device's fallback "
      "cannot run it: torch implements it for other accelerators only "
      "(no CPU kernel, no decomposition in torch._decomp)");
  const size_t begin = stack->size() - schema.arguments().size();
  Arguments found = alias_arguments(schema, *stack, begin);
  if (!found.device) {
    // e.g. an optional device argument given as None with mpsrt tensors elsewhere: run on cpu.
    op.redispatchBoxed(cpu_keys(quantized), stack);
    return;
  }
  auto d = found.device->has_index() ? found.device->index() : current_index();
  if (found.generator_arg >= 0) replace_generator((*stack)[begin + found.generator_arg], d);
  run_cpu_kernel(op, stack, found.seen, d, quantized);
  for (const auto& g : found.staged)  // before any argument is resized (write_back)
    if (g.written) write_span(g.copy);
  for (const auto& a : found.seen)
    if (a.written) write_back(a);
  Returns(*stack, schema.returns().size(), found.seen, d).to_device();
  if (count_op(schema, !found.staged.empty())) {
    TORCH_WARN("[torch] ", op_name(schema),
               " has no kernel on the mpsrt device: it ran as a CPU kernel on host copies of its "
               "tensors, moved over the bus (discrete memory; torch.mpsrt.fallback_counts() "
               "counts every such op). Warned once per op; to silence it: "
               "warnings.filterwarnings(\"ignore\", message=r\"\\[torch\\] .* has no kernel on "
               "the mpsrt device\")");
  }
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack, /*quantized=*/false);
}

void quantized_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack, /*quantized=*/true);
}

HostRun::HostRun(c10::DeviceIndex d)
    : d_(d), capture_(&t_state.capture_device), previous_capture_(*capture_) {
  check(api().host_op_enter(d, &t0_));
  *capture_ = d;
}

HostRun::~HostRun() {
  *capture_ = previous_capture_;
}

OpCount& op_count_of(const c10::OperatorHandle& op) {
  return op_count_named(op.operator_name());
}

void HostRun::done(const c10::OperatorHandle& op, OpCount& count) {
  *capture_ = previous_capture_;
  if (t0_ != 0) api().host_op_end(op.schema().name().c_str(), current_stream(d_), t0_);
  count.runs.fetch_add(1, std::memory_order_relaxed);
}

at::Tensor host_output(const at::Tensor& r, c10::DeviceIndex d) {
  if (!r.defined() || !r.device().is_cpu()) return r;
  if (auto st = adopt_storage(r, d, 1)) return adopted_tensor(r, *st);
  return copied_to_device(r, d);
}

void install_capture_allocator() {
  g_capture.base = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&g_capture, /*priority=*/1);
}

std::vector<int64_t> fallback_counts() {
  int64_t runs = 0;
  {
    OpCounts& c = op_counts();
    std::lock_guard<std::mutex> lock(c.mu);
    for (const auto& [name, e] : c.by_name) runs += e->runs.load(std::memory_order_relaxed);
  }
  return {runs, g_outputs_adopted.load(), g_outputs_copied.load(), g_arguments_staged.load()};
}

c10::Dict<std::string, int64_t> fallback_op_counts() {
  OpCounts& c = op_counts();
  std::lock_guard<std::mutex> lock(c.mu);
  c10::Dict<std::string, int64_t> out;
  for (const auto& [name, e] : c.by_name) {
    const int64_t calls =
        e->runs.load(std::memory_order_relaxed) - e->at_reset.load(std::memory_order_relaxed);
    if (calls > 0)
      out.insert(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name,
                 calls);
  }
  return out;
}

void reset_fallback_counts() {
  OpCounts& c = op_counts();
  std::lock_guard<std::mutex> lock(c.mu);
  for (const auto& [name, e] : c.by_name)
    e->at_reset.store(e->runs.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

// Structured ops whose meta function resizes its output twice (elementwise, then reduced): the
// generic path for a backend without their kernels allocates the reduced output and calls the
// out= kernel, whose meta then warns that a non-empty output is resized. Their functional CPU
// kernels through the fallback allocate the output themselves (in mpsrt memory) instead
// (mse_loss: its kernel, ops/loss.cpp, hands what it declines to the fallback the same way).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  ops::reg<at::_ops::smooth_l1_loss, ops::NoKernel>(m);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// Quantized tensors (qint8, quint8, qint32, quint4x2, quint2x4) on the device: their ops run as
// the QuantizedCPU kernels on quantized stand-ins through the fallback (aliases with the same
// quantizer, or staged host copies). Their factories make device tensors themselves: the
// QuantizedCPU factories allocate through the allocator of the device they are asked for
// (at::new_qtensor), so they run as they are, on the device.
void quantized_factory(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(cpu_keys(/*quantized=*/true), stack);
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&quantized_cpu_fallback>());
}

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  for (const char* name : {"empty_quantized", "_empty_affine_quantized",
                           "_empty_per_channel_affine_quantized", "empty_like"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&quantized_factory>());
  }
  // Ops whose composite kernel (which a backend's fallback comes after) makes a quantized
  // tensor through empty_strided, which quantized tensors lack: their QuantizedCPU kernels.
  for (const char* name : {"clone", "cat"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&quantized_cpu_fallback>());
  }
}

}  // namespace mpsrt::torch_glue
