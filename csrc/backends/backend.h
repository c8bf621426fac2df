// The backend interface: the narrow set of questions the core asks of a device API.
//
// A backend provides devices, heaps (raw device memory the core sub-allocates), queues that
// execute recorded command buffers asynchronously, and timeline events. It never calls the
// core and holds no policy: pooling, limits, commit modes, RNG offsets and trace records all
// live in the core. The shapes follow what Vulkan and Metal offer directly:
//   Heap          - VkDeviceMemory (+ one VkBuffer over it) / MTLHeap (+ a placed MTLBuffer) / mmap
//   Queue         - VkQueue / MTLCommandQueue / a worker thread
//   CommandBuffer - VkCommandBuffer / MTLCommandBuffer / a vector of closures
//   TimelineEvent - timeline VkSemaphore / MTLSharedEvent / an atomic counter + futex
// A command buffer is recorded, then committed, and completes asynchronously; completion is
// reported through a callback that carries the device start and end times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpsrt/dtype.h"

namespace mpsrt::backend {

/// What the core needs to know of a device.
struct DeviceInfo {
  std::string name;
  uint64_t total_memory = 0;
  uint64_t recommended_max_memory = 0;
  uint64_t max_buffer_size = 0;
  /// The device's memory model, decided when it is opened. true (unified): every heap is
  /// host memory the host addresses directly (Heap::host_ptr() is set). false (discrete):
  /// heaps are device-local memory the host cannot address (host_ptr() is nullptr); every
  /// host access goes through the core's staging path (create_staging_heap()).
  bool unified_memory = false;
  double timestamp_period_ns = 1.0;  ///< device timestamp ticks to nanoseconds
  std::string details;               ///< driver / kernel facts for reports, e.g. "kernels=avx512"
  /// The device is the host's processor (the cpu backend, a CPU-type Vulkan device such as
  /// lavapipe): CPU kernels on its memory are at least as fast as its own.
  bool cpu_type = false;
  /// Largest byte span one argument of a tensor kernel may cover (CommandBuffer::dispatch);
  /// 0 when the device runs no tensor kernels (the cpu backend, metal until its kernels are
  /// translated from the shared sources).
  uint64_t kernel_arg_bytes = 0;
};

/// A contiguous range of device memory obtained from the driver. The core places buffers
/// inside it at offsets. Destroying the object returns the memory to the driver.
class Heap {
 public:
  virtual ~Heap() = default;
  /// Size in bytes, as obtained from the driver (already rounded by the backend).
  virtual size_t size() const noexcept = 0;
  /// Host address of byte 0 when the heap is host-visible, else nullptr.
  virtual void* host_ptr() const noexcept = 0;
  /// The device address of byte 0: unique among the device's live heaps, so that the core's
  /// block addresses (Buffer::address(), snapshots) are unique without a host pointer. The
  /// host address where the heap is host-visible (the default); otherwise the device's own
  /// (vulkan: the VkBuffer's device address, or a synthetic range where the device has none).
  virtual uint64_t address() const noexcept { return reinterpret_cast<uint64_t>(host_ptr()); }
};

/// A byte position inside a heap.
struct BufferRef {
  Heap* heap = nullptr;
  size_t offset = 0;
};

/// The timeline event: a 64-bit value that only increases. Signalled and waited on by the
/// device (inside command buffers) and by the host.
class TimelineEvent {
 public:
  virtual ~TimelineEvent() = default;
  /// Host signal: sets the value (values never decrease; a lower value is ignored).
  virtual void signal(uint64_t value) = 0;
  /// Host wait until value() >= target. timeout_ns < 0 waits forever. Returns false on timeout.
  virtual bool wait(uint64_t target, int64_t timeout_ns) = 0;
  /// The current value.
  virtual uint64_t value() const = 0;
  /// Host wait until value() >= target or other.value() >= other_target, whichever comes
  /// first (other: an event of the same device). A backend that cannot wait for either of two
  /// events at once waits for this one alone, which is never shorter: callers pass as `other`
  /// an event that cannot be reached before this one is due (the completion timeline of the
  /// stream whose command buffer signals this event). Returns false on timeout.
  virtual bool wait_either(uint64_t target, TimelineEvent& other, uint64_t other_target,
                           int64_t timeout_ns) {
    (void)other;
    (void)other_target;
    return wait(target, timeout_ns);
  }
};

/// What a completed command buffer reports. Times are in the backend's device clock,
/// converted to nanoseconds; 0 when the backend cannot tell.
struct Completion {
  std::string error;  ///< empty when every command ran
  uint64_t device_start_ns = 0;
  uint64_t device_end_ns = 0;
};
using CompletionFn = std::function<void(const Completion&)>;
/// A failure of a command buffer, reported by a queue with a completion timeline.
using ErrorFn = std::function<void(const std::string&)>;

/// A random-number fill, following the stream definition of mpsrt/philox.h: the op and the
/// element type are mpsrt/dtype.h's (which op may write which dtype: mpsrt::random_supported;
/// an element's bytes: mpsrt::dtype_size).
using RandomOp = mpsrt::RandomOp;
using RandomDType = mpsrt::DType;
using mpsrt::random_supported;

struct RandomParams {
  uint64_t count = 0;  ///< elements to write
  uint64_t seed = 0;
  uint64_t offset = 0;  ///< first Philox block (the generator's offset when the op was encoded)
  RandomOp op = RandomOp::Bits;
  RandomDType dtype = RandomDType::U32;
  double a = 0.0;          ///< Uniform: low; Normal: mean
  double b = 1.0;          ///< Uniform: high; Normal: std
  int64_t low = 0;         ///< IntRange
  uint64_t range = 1;      ///< IntRange: high - low (>= 1; may be 2^64 - 1 at most)
  uint64_t threshold = 0;  ///< Bernoulli: philox::bernoulli_threshold(p)
};

/// An integer range wider than 2^32: two words per element.
inline bool random_is_wide(const RandomParams& p) noexcept {
  return p.op == RandomOp::IntRange && p.range > (uint64_t(1) << 32);
}

/// Philox words per element of p (1 or 2; mpsrt::random_words_per_element).
inline uint32_t random_words_per_element(const RandomParams& p) noexcept {
  return mpsrt::random_words_per_element(p.op, p.dtype, random_is_wide(p));
}

/// 32-bit words an op of `p` consumes (the generator advances by ceil(words / 4) blocks): one
/// or two per element; normal takes them in pairs.
inline uint64_t random_words(const RandomParams& p) noexcept {
  if (p.op == RandomOp::Normal) return (p.count + 1) / 2 * 2;
  return random_words_per_element(p) * p.count;
}

/// One buffer argument of a tensor kernel: the bytes [ref.offset, ref.offset + nbytes) of a
/// heap, bound as the kernel's storage buffer of the argument's index (see KernelLaunch).
struct KernelArg {
  BufferRef ref;
  size_t nbytes = 0;
  bool written = false;  ///< the kernel may write it (else it only reads)
};

/// A dispatch of a tensor kernel of mpsrt's kernel library (csrc/kernels/, named by index in
/// kernel_names()). The kernel sees argument i as its storage buffer binding i; push-constant
/// bytes [0, 32) are eight 32-bit words the backend fills with each argument's byte offset
/// inside its binding (arguments are bound from an aligned position at or before their first
/// byte), bytes [32, 32 + push_bytes) are `push`. Specialisation constants 0 .. nspec - 1 are
/// `spec`. The kernel runs groups[0] x groups[1] x groups[2] workgroups.
struct KernelLaunch {
  static constexpr uint32_t kMaxArgs = 8;
  static constexpr uint32_t kMaxSpec = 16;
  static constexpr uint32_t kBaseBytes = 32;
  static constexpr uint32_t kMaxPushBytes = 96;
  uint32_t kernel = 0;
  uint32_t nspec = 0;
  uint32_t spec[kMaxSpec] = {};
  uint32_t nargs = 0;
  KernelArg args[kMaxArgs] = {};
  uint32_t push_bytes = 0;
  alignas(8) unsigned char push[kMaxPushBytes] = {};
  uint32_t groups[3] = {1, 1, 1};
};

/// The names of the tensor kernels, in index order (KernelLaunch::kernel).
const std::vector<std::string_view>& kernel_names();

/// A recording of commands. Commands execute in the order encoded. Not thread-safe: the core
/// serialises encoding per stream.
class CommandBuffer {
 public:
  virtual ~CommandBuffer() = default;
  /// Fills nbytes at dst with a repeating pattern of pattern_size bytes (1, 2, 4 or 8), the
  /// pattern's byte 0 at dst. `pattern` holds the bytes in little-endian order.
  virtual void fill(BufferRef dst, size_t nbytes, uint64_t pattern, unsigned pattern_size) = 0;
  /// Copies nbytes from src to dst; the ranges may overlap.
  virtual void copy(BufferRef src, BufferRef dst, size_t nbytes) = 0;
  /// Runs fn on a runtime thread after every earlier command of this command buffer is done
  /// and before any later one starts. An exception from fn fails the command buffer.
  virtual void host_callback(std::function<void()> fn) = 0;
  /// Sets the event to value once every earlier command is done. Signals that end the command
  /// buffer (only signals and timestamps after them: see trailing_signals) are set only after
  /// the command buffer's on_complete has run, so that a host that sees such an event reached
  /// also sees the command buffer complete (the stream's query() agrees with the event's).
  virtual void signal(TimelineEvent& event, uint64_t value) = 0;
  /// Later commands start only once the event's value reaches value.
  virtual void wait(TimelineEvent& event, uint64_t value) = 0;
  /// Fills dst with p.count elements of random numbers (see RandomParams).
  virtual void random(BufferRef dst, const RandomParams& p) = 0;
  /// Runs a tensor kernel (see KernelLaunch). Only a device whose DeviceInfo::kernel_arg_bytes
  /// is not 0 has them; the core checks the arguments' spans against it.
  virtual void dispatch(const KernelLaunch& k) {
    (void)k;
    throw std::logic_error("[backend] this device runs no tensor kernels");
  }
  /// Writes the device time (ns) at which execution reaches this point into *out; the value
  /// is valid once the command buffer has completed. `out` must outlive the command buffer.
  virtual void timestamp(uint64_t* out) = 0;
  /// Number of commands encoded.
  virtual size_t size() const noexcept = 0;
};

/// Index of the first of the signals that end a recording `cmds` (a vector of commands with a
/// `kind` of C::kSignal, C::kTimestamp, ...): from there on come only signals and timestamps.
/// A queue sets those signals after on_complete (see CommandBuffer::signal).
template <class Cmds>
size_t trailing_signals(const Cmds& cmds) noexcept {
  using C = typename Cmds::value_type;
  size_t i = cmds.size();
  while (i > 0 && (cmds[i - 1].kind == C::kSignal || cmds[i - 1].kind == C::kTimestamp)) --i;
  return i;
}

/// An in-order queue of command buffers.
class Queue {
 public:
  virtual ~Queue() = default;
  virtual std::unique_ptr<CommandBuffer> create_command_buffer() = 0;
  /// Hands a recorded command buffer to the device. Returns at once; on_complete runs on a
  /// runtime thread once every command has executed (or one failed), in commit order.
  virtual void commit(std::unique_ptr<CommandBuffer> cb, CompletionFn on_complete) = 0;
  /// The queue's completion timeline, where the queue keeps one (nullptr otherwise: the core
  /// then keeps an event of its own and signals it from each on_complete). Its value counts
  /// the command buffers committed to this queue whose work is done: the n-th commit sets it
  /// to n. A device that signals it itself lets a host that waits for a command buffer wait
  /// for the device directly, with no runtime thread in between.
  ///
  /// Asking for it changes commit()'s contract: on_complete may be empty, and the device may
  /// then set the timeline directly; a failure of such a command buffer (a host callback that
  /// threw, a submission the driver refused) is reported through on_error before the timeline
  /// reaches it. A non-empty on_complete still runs before the timeline reaches its command
  /// buffer. Signals that end a command buffer (trailing_signals) are set once the timeline
  /// has reached it. Called at most once, before the first commit; on_error must outlive the
  /// queue.
  virtual TimelineEvent* timeline(ErrorFn on_error) {
    (void)on_error;
    return nullptr;
  }
  /// Optionally runs a command buffer to completion on the calling thread, which is about to
  /// wait for it anyway (a host-memory backend saves the hand-off and keeps the data in the
  /// caller's cache). The core calls it only when every earlier command buffer of this queue
  /// has completed. Returns false (leaving cb untouched) to have it committed instead.
  virtual bool run_inline(std::unique_ptr<CommandBuffer>& cb, const CompletionFn& on_complete) {
    (void)cb;
    (void)on_complete;
    return false;
  }
};

/// One device of a backend.
class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const noexcept = 0;
  /// A new heap of at least nbytes (the backend may round up). Returns nullptr when the
  /// driver refuses (out of memory, or past the device's memory budget); throws mpsrt::Error
  /// for other failures. Its memory follows the device's memory model (DeviceInfo::
  /// unified_memory): host-visible (host_ptr() set) on unified memory, device-local and not
  /// mapped (host_ptr() nullptr) on discrete memory.
  virtual std::unique_ptr<Heap> create_heap(size_t nbytes) = 0;
  /// A heap of at least nbytes of host-visible memory the device can copy to and from (copy
  /// commands accept it like any heap), for the core's staging of host <-> device copies on
  /// discrete memory: host_ptr() is set. Where the device offers a choice, memory that is
  /// host-cached (fast host reads) and not device-local. Returns nullptr when it cannot have
  /// one. The default: a heap from create_heap() when that one is host-visible (counted as
  /// heaps are); vulkan's are host memory, not counted in driver_allocated_bytes().
  virtual std::unique_ptr<Heap> create_staging_heap(size_t nbytes) {
    std::unique_ptr<Heap> h = create_heap(nbytes);
    return h && h->host_ptr() != nullptr ? std::move(h) : nullptr;
  }
  /// Bytes currently held from the driver / OS for this device's heaps, exactly.
  virtual uint64_t driver_allocated_bytes() const noexcept = 0;
  /// A new queue. priority: 0 normal, < 0 low, > 0 high (a hint).
  virtual std::unique_ptr<Queue> create_queue(int priority) = 0;
  virtual std::unique_ptr<TimelineEvent> create_event() = 0;
  /// Nanoseconds to add to a device time (timestamps, Completion) to get the host's steady
  /// clock, which the profiler's records use. 0 when the device clock is the host clock.
  virtual int64_t host_clock_offset_ns() const noexcept { return 0; }
  /// GPU capture for the platform's GPU debugger (metal: a .gputrace document). Whether a
  /// capture of this device can be taken now; when not, `why` (if given) says why and what to
  /// do. Never throws.
  virtual bool capture_available(std::string* why) const {
    if (why != nullptr) *why = "this backend has no GPU capture";
    return false;
  }
  /// Starts capturing this device's work into the document `path`; throws mpsrt::Error when
  /// that fails. The core calls it only when capture_available() and no capture runs.
  virtual void begin_capture(const std::string& path) { (void)path; }
  /// Ends the capture begun by begin_capture(), writing the document.
  virtual void end_capture() {}
};

/// A platform's own tracing tool (os_signpost for Instruments, offered by the metal backend)
/// that gets a profiler session's signposts too: command encodes and completions, marks and
/// ranges. A method per signpost, because such tools want each name and format as a string
/// literal. Called only while a session runs, from any thread; no platform type crosses this
/// interface.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  /// A command was encoded on `stream` (an instant); `op` is the profiler's op name.
  virtual void encode(const char* op, int64_t stream, uint64_t bytes) = 0;
  /// A command of a completed command buffer (an instant): its device time.
  virtual void completed(const char* op, int64_t stream, uint64_t device_ns) = 0;
  /// profiler::mark (an instant).
  virtual void mark(std::string_view message) = 0;
  /// profiler::range_push: begins an interval and returns the id that range_end() gets.
  virtual uint64_t range_begin(std::string_view message) = 0;
  /// profiler::range_pop of an interval this sink began.
  virtual void range_end(uint64_t id) = 0;
};

/// The runtime's settings as a backend receives them (Backend::configure). Every MPSRT_*
/// variable is read once, by the core's one options table (core/options.cpp), which validates
/// and documents it (mpsrt::options(), docs/environment.md); a backend looks up the variables that
/// concern it by name and makes its own settings of them. A value is the text mpsrt::options()
/// shows for the value in force (the default when unset): a decimal number ("50") or a word
/// ("auto", "shared").
class Settings {
 public:
  void set(std::string name, std::string value) {
    values_.emplace_back(std::move(name), std::move(value));
  }
  /// The value of the variable `name`. Throws std::logic_error when the table has no such
  /// variable (a backend asking for one is a bug of mpsrt's, found at its first start).
  const std::string& text(std::string_view name) const {
    for (const auto& [n, v] : values_) {
      if (n == name) return v;
    }
    throw std::logic_error("[backend] " + std::string(name) +
                           " is not in the options table; add it to core/options.cpp");
  }
  /// The value of a numeric variable (the table has checked its range).
  int64_t integer(std::string_view name) const {
    const std::string& t = text(name);
    char* end = nullptr;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || end != t.c_str() + t.size()) {
      throw std::logic_error("[backend] " + std::string(name) + "='" + t + "' is not a number");
    }
    return v;
  }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
};

/// A device API. One static instance per backend; open devices are owned by the core.
/// A backend reads no environment: it takes its settings from the core's options through
/// configure(), and names them in its own header where it has any (cpu/cpu_backend.h:
/// CpuConfig, vulkan/vulkan_backend.h: VulkanConfig).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const noexcept = 0;
  /// Takes the backend's settings from the runtime's options. The runtime calls it on the
  /// backend it chose, each time it starts, before device_count() and open_device(). Throws
  /// std::invalid_argument for a setting this machine cannot honour, and then changes
  /// nothing. The default: a backend without settings.
  virtual void configure(const Settings& settings) { (void)settings; }
  /// True when the backend was compiled in.
  virtual bool is_built() const noexcept = 0;
  /// True when it works on this machine (a driver and at least one device). Never throws.
  virtual bool is_available() noexcept = 0;
  /// Why it is unavailable, for error messages ("" when available).
  virtual std::string unavailable_reason() = 0;
  /// When every usable device of this backend is a software implementation that runs on the
  /// host's CPU (Vulkan's lavapipe or SwiftShader), says so, e.g. "llvmpipe (LLVM 15.0.6, 256
  /// bits) is a software device"; "" when it has a hardware device or is unavailable. The core
  /// then prefers the cpu backend, which does the same work natively on the same cores, unless
  /// MPSRT_BACKEND names this one. Never throws.
  virtual std::string software_only() { return {}; }
  virtual int device_count() = 0;
  virtual std::unique_ptr<Device> open_device(int index) = 0;
  /// Whether a process forked after this backend started (created driver objects) may use it.
  /// Drivers whose state does not survive fork() (Vulkan, Metal) return false once started.
  virtual bool usable_after_fork() const noexcept { return true; }
  /// Runs in a forked child, single-threaded, before anything else: drop process-wide state
  /// that belongs to the parent's threads.
  virtual void after_fork_child() noexcept {}
  /// The platform tracing tool that gets profiler signposts while this backend runs (nullptr:
  /// none). It lives to the end of the process.
  virtual TraceSink* trace_sink() noexcept { return nullptr; }
};

/// Every backend, best first: metal, vulkan, cpu (a backend whose devices are all software
/// ones ranks after cpu: see Backend::software_only). Unbuilt ones report is_built() == false.
const std::vector<Backend*>& all_backends();
Backend& cpu_backend();
Backend& vulkan_backend();
Backend& metal_backend();

}  // namespace mpsrt::backend
