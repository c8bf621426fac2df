#include "core/runtime.h"

#include <pthread.h>

#include <map>
#include <string>

#include "core/profiler.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

std::atomic<Runtime*> Runtime::instance_{nullptr};
std::atomic<uint64_t> Runtime::generation_{0};

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

namespace {

// MPSRT_BACKEND unset: the first of preferred_backends(all).
BackendChoice choose_best(const std::vector<backend::Backend*>& all,
                          const std::vector<std::string>& built) {
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

// MPSRT_BACKEND=wanted.
BackendChoice choose_named(const std::string& wanted, const std::vector<backend::Backend*>& all,
                           const std::vector<std::string>& built) {
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

}  // namespace

BackendChoice choose_backend(const std::string& wanted, const std::vector<backend::Backend*>& all) {
  std::vector<std::string> built;
  for (backend::Backend* b : all) {
    if (b->is_built()) built.push_back(b->name());
  }
  return wanted.empty() ? choose_best(all, built) : choose_named(wanted, all, built);
}

Runtime::Runtime(Options options) : options_(std::move(options)) {
  BackendChoice choice = choose_backend(options_.backend, backend::all_backends());
  backend_ = choice.backend;
  backend_reason_ = std::move(choice.reason);
  if (fork_generation() != 0 && !backend_->usable_after_fork()) {
    throw_error(std::string("[runtime] the ") + backend_->name() +
                " backend started before this process was forked, and its driver cannot be "
                "used in a forked child; start workers with multiprocessing's 'spawn' (or "
                "'forkserver') method, or set MPSRT_BACKEND=cpu in the child");
  }
  backend_->configure(backend_settings(options_));
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
  // What clients cached of the parent's runtime (runtime_generation) is stale here.
  generation_.fetch_add(1, std::memory_order_acq_rel);
  Quiet::bump();
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
  generation_.fetch_add(1, std::memory_order_acq_rel);
  Quiet::bump();
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

void Quiet::note() noexcept {
  if (prof::flags() != 0) return;  // a session's host operations are timed: never quiet
  const uint64_t seen = activity_.load(std::memory_order_seq_cst);
  Runtime* r = Runtime::instance_.load(std::memory_order_acquire);
  if (r == nullptr) return;
  try {
    for (DeviceContext* d : r->open_devices()) {
      if (d->stale()) return;
      for (const StreamImpl* s : d->streams().all())
        if (!s->idle()) return;
    }
  } catch (...) {  // all() copies a vector: out of host memory means not known quiet
    return;
  }
  devices_.store(r->device_count(), std::memory_order_release);
  at_.store(seen, std::memory_order_release);
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
