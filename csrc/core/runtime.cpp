#include "core/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <map>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/vulkan/vulkan_backend.h"
#include "core/allocator/caching_allocator.h"
#include "core/allocator/debug_log.h"
#include "core/allocator/history.h"
#include "core/allocator/stats.h"
#include "core/generator.h"
#include "core/profiler.h"
#include "core/staging.h"
#include "core/stream.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

namespace {
// The calling thread's current streams, per device. A table belongs to one runtime
// generation: after a reset every thread starts again from the default streams.
constexpr int kMaxDevices = 64;
struct CurrentStreams {
  uint64_t generation = 0;
  std::array<StreamImpl*, kMaxDevices> stream{};
};
thread_local CurrentStreams tls_streams;
std::atomic<uint64_t> g_generation{0};
}  // namespace

std::atomic<Runtime*> Runtime::instance_{nullptr};
std::atomic<uint64_t> g_fork_generation{0};

void throw_forked(const char* what) {
  throw_error(std::string("[runtime] this ") + what +
              " belongs to the parent process: this process was forked after mpsrt started, "
              "and the parent's devices, streams and memory are not usable here; make new "
              "ones in this process, or start workers with multiprocessing's 'spawn' method");
}

namespace {
std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}
// Environment overlay installed by Runtime::reset (tests); empty optional means process env.
std::unique_ptr<std::map<std::string, std::string>>& env_override() {
  static std::unique_ptr<std::map<std::string, std::string>> m;
  return m;
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

}  // namespace

std::vector<backend::Backend*> preferred_backends(const std::vector<backend::Backend*>& all) {
  std::vector<backend::Backend*> hardware, software;
  for (backend::Backend* b : all) {
    if (!b->is_built() || !b->is_available()) continue;
    (b->software_only().empty() ? hardware : software).push_back(b);
  }
  hardware.insert(hardware.end(), software.begin(), software.end());
  return hardware;
}

BackendChoice choose_backend(const std::string& wanted, const std::vector<backend::Backend*>& all) {
  std::vector<std::string> built;
  for (backend::Backend* b : all) {
    if (b->is_built()) built.push_back(b->name());
  }
  if (wanted.empty()) {
    const std::vector<backend::Backend*> order = preferred_backends(all);
    if (order.empty()) {
      throw_error("[runtime] no backend of this build works on this machine (built: " +
                  join_names(built) + ")");
    }
    backend::Backend* chosen = order.front();
    std::string reason = std::string(chosen->name()) + ": the best available backend";
    const std::string own = chosen->software_only();
    if (!own.empty()) reason += "; " + own + "; no hardware backend is available";
    // Name what was passed over for being a software device, and how to have it anyway.
    for (backend::Backend* b : order) {
      if (b == chosen) continue;
      const std::string why = b->software_only();
      if (why.empty()) continue;
      reason += std::string("; ") + b->name() + ": " + why + "; using " + chosen->name() +
                " (set MPSRT_BACKEND=" + b->name() + " to use it)";
    }
    return {chosen, reason};
  }
  for (backend::Backend* b : all) {
    if (wanted != b->name()) continue;
    if (!b->is_built()) {
      throw_invalid("[runtime] MPSRT_BACKEND=" + wanted + ": " + b->unavailable_reason() +
                    "; built backends: " + join_names(built));
    }
    if (!b->is_available()) {
      throw_error("[runtime] MPSRT_BACKEND=" + wanted + " cannot start: " +
                  b->unavailable_reason() + "; unset MPSRT_BACKEND to use the best available one");
    }
    std::string reason = wanted + ": chosen by MPSRT_BACKEND";
    const std::string sw = b->software_only();
    if (!sw.empty()) reason += "; " + sw;
    return {b, reason};
  }
  throw_invalid("[runtime] MPSRT_BACKEND=" + wanted +
                " is not a backend; built backends: " + join_names(built));
}

namespace {

// A DeviceContext as its allocator sees it: the backend's heaps and limits, and the
// device-wide steps of empty_cache() and the out-of-memory ladder.
class DevicePool final : public PoolDevice {
 public:
  explicit DevicePool(DeviceContext& device) : device_(device) {}
  int index() const noexcept override { return device_.index(); }
  uint64_t recommended_max_memory() const noexcept override {
    return device_.backend_device().info().recommended_max_memory;
  }
  uint64_t max_buffer_size() const noexcept override {
    return device_.backend_device().info().max_buffer_size;
  }
  std::unique_ptr<backend::Heap> create_heap(size_t nbytes) override {
    return device_.backend_device().create_heap(nbytes);
  }
  void wait_idle() override { device_.wait_idle(); }
  void flush_streams() override {
    for (StreamImpl* s : device_.streams()) s->flush();
  }
  bool stale() const noexcept override { return device_.stale(); }

 private:
  DeviceContext& device_;
};

}  // namespace

DeviceContext::DeviceContext(int index, std::unique_ptr<backend::Device> dev,
                             const Options& options)
    : index_(index), dev_(std::move(dev)), generation_(g_generation.load()) {
  default_stream_ = std::make_unique<StreamImpl>(*this, 0, 0);
  all_streams_.push_back(default_stream_.get());
  stats_ = std::make_unique<MemoryStats>();
  history_ = std::make_unique<History>();
  pool_device_ = std::make_unique<DevicePool>(*this);
  allocator_ = std::make_unique<CachingAllocator>(*pool_device_, options.high_watermark_ratio,
                                                  options.low_watermark_ratio);
  staging_ = std::make_unique<StagingPool>(*dev_, index, options.staging_bytes);
  generator_ = std::make_shared<GeneratorImpl>(nondeterministic_seed());
  allocator_->add_observer(stats_.get());
  allocator_->add_observer(history_.get());
  // After the statistics: the trace samples their updated values.
  alloc_trace_ = std::make_unique<prof::AllocatorTrace>(index, *stats_);
  allocator_->add_observer(alloc_trace_.get());
  if (options.debug_allocator != 0) {
    debug_log_ = std::make_unique<DebugLog>(index, options.debug_allocator);
    allocator_->add_observer(debug_log_.get());
  }
}

DeviceContext::~DeviceContext() {
  wait_idle();
  staging_.reset();    // staging heaps and ...
  allocator_.reset();  // ... heaps go back to the backend before its device is closed
  for (auto& cls : pool_) {
    for (auto& s : cls) s.reset();
  }
  default_stream_.reset();
  free_events_.clear();
  all_events_.clear();
}

StreamImpl& DeviceContext::current_stream() noexcept {
  CurrentStreams& t = tls_streams;
  if (MPSRT_LIKELY(t.generation == generation_)) {
    StreamImpl* s = t.stream[static_cast<size_t>(index_)];
    if (s != nullptr) return *s;
  }
  return *default_stream_;
}

StreamImpl& DeviceContext::set_current_stream(StreamImpl& s) noexcept {
  CurrentStreams& t = tls_streams;
  if (t.generation != generation_) {
    t.stream.fill(nullptr);
    t.generation = generation_;
  }
  StreamImpl* prev = t.stream[static_cast<size_t>(index_)];
  t.stream[static_cast<size_t>(index_)] = &s;
  return prev != nullptr ? *prev : *default_stream_;
}

StreamImpl& DeviceContext::pool_stream(int priority) {
  const int cls = priority < 0 ? 0 : (priority == 0 ? 1 : 2);
  const uint32_t k = pool_next_[static_cast<size_t>(cls)].fetch_add(1, std::memory_order_relaxed) %
                     kPoolStreamsPerPriority;
  std::lock_guard<std::mutex> lock(streams_mu_);
  auto& slot = pool_[static_cast<size_t>(cls)][k];
  if (!slot) {
    slot =
        std::make_unique<StreamImpl>(*this, next_stream_id_++, cls == 0 ? -1 : (cls == 1 ? 0 : 1));
    all_streams_.push_back(slot.get());
  }
  return *slot;
}

std::vector<StreamImpl*> DeviceContext::streams() {
  std::lock_guard<std::mutex> lock(streams_mu_);
  return all_streams_;
}

PooledEvent* DeviceContext::acquire_event() {
  std::lock_guard<std::mutex> lock(events_mu_);
  // Only an event whose last record has completed may be reused: a stream still waiting on
  // an older value must not be released by the new owner's records.
  for (size_t i = free_events_.size(); i-- > 0;) {
    PooledEvent* e = free_events_[i];
    if (e->event->value() >= e->last_value) {
      free_events_[i] = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  auto e = std::make_unique<PooledEvent>();
  e->event = dev_->create_event();
  all_events_.push_back(std::move(e));
  return all_events_.back().get();
}

void DeviceContext::release_event(PooledEvent* e) {
  std::lock_guard<std::mutex> lock(events_mu_);
  free_events_.push_back(e);
}

size_t DeviceContext::events_in_use() {
  std::lock_guard<std::mutex> lock(events_mu_);
  return all_events_.size() - free_events_.size();
}

DeviceProperties DeviceContext::properties(const char* backend_name) const {
  const backend::DeviceInfo& i = dev_->info();
  DeviceProperties p;
  p.index = index_;
  p.name = i.name;
  p.backend = backend_name;
  p.total_memory = i.total_memory;
  p.recommended_max_memory = i.recommended_max_memory;
  p.max_buffer_size = i.max_buffer_size;
  p.unified_memory = i.unified_memory;
  p.timestamp_period_ns = i.timestamp_period_ns;
  p.details = i.details;
  return p;
}

void DeviceContext::synchronize() {
  // Commit every stream's open work but one, so their work runs side by side; then wait for
  // the one left open first: its synchronize() may run that work on this thread (no hand-off,
  // the data stays in this core's cache) while the others run on their queues. Every stream is
  // waited for even when one failed; the first failure is raised after.
  std::vector<StreamImpl*> all = streams();
  StreamImpl* inline_one = nullptr;
  for (StreamImpl* s : all) {
    if (!s->has_open_work()) continue;
    if (inline_one != nullptr) inline_one->flush();
    inline_one = s;
  }
  if (inline_one != nullptr) {
    std::iter_swap(all.begin(), std::find(all.begin(), all.end(), inline_one));
  }
  std::exception_ptr first;
  for (StreamImpl* s : all) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void DeviceContext::wait_idle() {
  for (StreamImpl* s : streams()) s->wait_idle();
}

Runtime::Runtime(Options options) : options_(std::move(options)) {
  // One generation per runtime: every device of it shares the thread-local stream table.
  g_generation.fetch_add(1);
  BackendChoice choice = choose_backend(options_.backend, backend::all_backends());
  backend_ = choice.backend;
  backend_reason_ = std::move(choice.reason);
  if (fork_generation() != 0 && !backend_->usable_after_fork()) {
    throw_error(std::string("[runtime] the ") + backend_->name() +
                " backend started before this process was forked, and its driver cannot be "
                "used in a forked child; start workers with multiprocessing's 'spawn' (or "
                "'forkserver') method, or set MPSRT_BACKEND=cpu in the child");
  }
  if (backend_ == &backend::cpu_backend()) {
    cpu::CpuConfig cfg;
    cfg.devices = options_.cpu_devices;
    cfg.spin_ns = options_.cpu_spin_us * 1000;
    cfg.isa = options_.cpu_isa;
    cfg.threads = options_.cpu_threads;
    cpu::configure(cfg);
  }
  if (backend_ == &backend::vulkan_backend()) {
    vk::VulkanConfig cfg;
    cfg.spin_ns = options_.vulkan_spin_us * 1000;
    cfg.shared_queue = options_.vulkan_shared_queue;
    cfg.force_discrete = options_.vulkan_memory == "discrete";
    cfg.workgroup = options_.vulkan_workgroup;
    cfg.groups_per_sm = options_.vulkan_groups_per_sm;
    cfg.unroll = options_.vulkan_unroll;
    cfg.vector_bytes = options_.vulkan_vector;
    cfg.copy_kernel = options_.vulkan_copy == "kernel";
    vk::configure(cfg);
  }
  device_count_ = backend_->device_count();
  // The backend's platform tracing (os_signpost on metal) while this runtime runs.
  if (backend::TraceSink* sink = backend_->trace_sink()) prof::set_platform_sink(sink);
  devices_.reset(new std::atomic<DeviceContext*>[static_cast<size_t>(device_count_)]);
  for (int i = 0; i < device_count_; ++i) devices_[static_cast<size_t>(i)].store(nullptr);
}

Runtime::~Runtime() {
  for (int i = 0; i < device_count_; ++i) {
    DeviceContext* d = devices_[static_cast<size_t>(i)].exchange(nullptr);
    delete d;  // waits for the device's work
  }
  if (backend::TraceSink* sink = backend_->trace_sink()) {
    backend::TraceSink* prev = prof::set_platform_sink(nullptr);
    if (prev != sink) prof::set_platform_sink(prev);  // someone else's: theirs to remove
  }
}

namespace {
// Registered once per process, before any runtime can start.
[[maybe_unused]] const bool g_atfork_registered =
    pthread_atfork(&Runtime::fork_prepare, &Runtime::fork_parent, &Runtime::fork_child) == 0;
}  // namespace

void Runtime::fork_prepare() {
  // No runtime is made or torn down while the process forks.
  init_mutex().lock();
  prof::fork_prepare();
}

void Runtime::fork_parent() {
  prof::fork_parent();
  init_mutex().unlock();
}

void Runtime::fork_child() {
  // Single-threaded here. The parent's runtime is left as it is (never destroyed: its
  // locks may be held by threads that do not exist here); objects made from it are stale.
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  prof::fork_child();
  for (backend::Backend* b : backend::all_backends()) b->after_fork_child();
  instance_.store(nullptr, std::memory_order_release);
  init_mutex().unlock();
}

Runtime& Runtime::init_slow() {
  std::lock_guard<std::mutex> lock(init_mutex());
  Runtime* r = instance_.load(std::memory_order_acquire);
  if (r != nullptr) return *r;
  const auto& overlay = env_override();
  Options o = overlay ? parse_options([&](const char* name) -> const char* {
    auto it = overlay->find(name);
    return it == overlay->end() ? nullptr : it->second.c_str();
  })
                      : parse_options(process_env);
  // The runtime is deliberately never destroyed at exit: worker threads may still be running
  // callbacks while static destructors run. reset() is the only teardown.
  r = new Runtime(std::move(o));
  instance_.store(r, std::memory_order_release);
  prof::start_from_options(*r);
  return *r;
}

void Runtime::reset(const EnvLookup* env) {
  std::lock_guard<std::mutex> lock(init_mutex());
  prof::reset();
  Runtime* r = instance_.exchange(nullptr, std::memory_order_acq_rel);
  delete r;
  current_device_slot() = 0;
  if (env == nullptr) {
    env_override().reset();
    return;
  }
  // Snapshot the variables the option table reads.
  auto m = std::make_unique<std::map<std::string, std::string>>();
  for (const OptionInfo& info : describe_options(Options{})) {
    for (const std::string& name : {info.name, info.alias}) {
      if (name.empty()) continue;
      if (const char* v = (*env)(name.c_str())) (*m)[name] = v;
    }
  }
  env_override() = std::move(m);
}

void Runtime::bad_index(int index) const {
  throw_invalid("[device] invalid device index " + std::to_string(index) +
                ": expected 0 <= index < " + std::to_string(device_count_) +
                " (the device count of backend " + backend_->name() + ")");
}

DeviceContext& Runtime::open_device(int index) {
  std::lock_guard<std::mutex> lock(open_mu_);
  auto& slot = devices_[static_cast<size_t>(index)];
  DeviceContext* d = slot.load(std::memory_order_acquire);
  if (d == nullptr) {
    d = new DeviceContext(index, backend_->open_device(index), options_);
    slot.store(d, std::memory_order_release);
  }
  return *d;
}

std::vector<DeviceContext*> Runtime::open_devices() const {
  std::vector<DeviceContext*> out;
  for (int i = 0; i < device_count_; ++i) {
    if (DeviceContext* d = devices_[static_cast<size_t>(i)].load(std::memory_order_acquire)) {
      out.push_back(d);
    }
  }
  return out;
}

}  // namespace mpsrt::detail
