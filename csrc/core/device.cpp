#include "core/device.h"

#include <string>

#include "core/allocator/caching_allocator.h"
#include "core/allocator/debug_log.h"
#include "core/allocator/history.h"
#include "core/allocator/stats.h"
#include "core/event.h"
#include "core/generator.h"
#include "core/profiler.h"
#include "core/staging.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

std::atomic<uint64_t> g_fork_generation{0};

void throw_forked(const char* what) {
  throw_error(std::string("[runtime] this ") + what +
              " belongs to the parent process: this process was forked after mpsrt started, "
              "and the parent's devices, streams and memory are not usable here; make new "
              "ones in this process, or start workers with multiprocessing's 'spawn' method");
}

namespace {

// The AllocDevice of a DeviceContext: the backend's heaps and limits, and the device-wide
// steps of empty_cache() and the out-of-memory ladder.
class AllocDeviceAdaptor final : public AllocDevice {
 public:
  explicit AllocDeviceAdaptor(DeviceContext& device) : device_(device) {}
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
  void flush_streams() override { device_.streams().flush(); }
  bool stale() const noexcept override { return device_.stale(); }

 private:
  DeviceContext& device_;
};

}  // namespace

DeviceContext::DeviceContext(int index, std::unique_ptr<backend::Device> dev,
                             const Options& options)
    : index_(index),
      dev_(std::move(dev)),
      events_(std::make_unique<EventPool>(*dev_)),
      streams_(*this) {
  stats_ = std::make_unique<MemoryStats>();
  history_ = std::make_unique<History>();
  alloc_device_ = std::make_unique<AllocDeviceAdaptor>(*this);
  allocator_ = std::make_unique<CachingAllocator>(*alloc_device_, options.high_watermark_ratio,
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
  // The members go in reverse order: the streams (each waits for its queue), then the event
  // pool, then the backend device.
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
  p.cpu_type = i.cpu_type;
  p.kernel_arg_bytes = i.kernel_arg_bytes;
  return p;
}

}  // namespace mpsrt::detail
