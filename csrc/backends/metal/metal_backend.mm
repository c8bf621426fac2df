// The metal backend: Apple GPUs through Metal (Objective-C++, ARC).
//
//   Heap          - an MTLHeap of shared storage with one MTLBuffer placed over all of it
//                   (unified memory), or one shared MTLBuffer (other GPUs)
//   Queue         - an MTLCommandQueue, fed by a submit thread and drained in order by a
//                   completion thread (metal_queue.mm)
//   CommandBuffer - a recording of commands, turned into MTLCommandBuffers when submitted
//   TimelineEvent - an MTLSharedEvent
//
// Devices are discovered once per process, on the first question asked; a machine without a
// Metal device (a virtual machine, a CI runner without GPU access) reports the backend
// unavailable with the reason.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <mach/mach_time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backends/metal/metal_common.h"
#include "mpsrt/error.h"

namespace mpsrt::metal {

std::string describe(NSError* error) {
  if (error == nil) return "unknown error";
  NSString* text = error.localizedDescription;
  const char* s = text.UTF8String;
  return s != nullptr ? std::string(s) : std::string("unknown error");
}

void fail(const std::string& what, NSError* error, const char* todo) {
  detail::throw_error("[metal] " + what + ": " + describe(error) + "; " + todo);
}

namespace {

double ns_per_tick() noexcept {
  static const double ratio = [] {
    mach_timebase_info_data_t tb = {0, 0};
    if (mach_timebase_info(&tb) != 0 || tb.denom == 0) return 1.0;
    return static_cast<double>(tb.numer) / static_cast<double>(tb.denom);
  }();
  return ratio;
}

}  // namespace

uint64_t device_now_ns() noexcept {
  return static_cast<uint64_t>(static_cast<double>(mach_absolute_time()) * ns_per_tick());
}

uint64_t seconds_to_ns(double seconds) noexcept {
  return seconds > 0 ? static_cast<uint64_t>(seconds * 1e9) : 0;
}

// ---------------------------------------------------------------- heaps

MetalHeap::MetalHeap(std::shared_ptr<DeviceShared> d, id<MTLHeap> heap, id<MTLBuffer> buffer,
                     size_t size)
    : d_(std::move(d)), heap_(heap), buffer_(buffer), size_(size), host_(buffer.contents) {
  d_->held.fetch_add(size_, std::memory_order_relaxed);
}

MetalHeap::~MetalHeap() {
  // The core destroys a heap only once no committed command buffer uses it any more.
  buffer_ = nil;
  heap_ = nil;
  d_->held.fetch_sub(size_, std::memory_order_relaxed);
}

// ---------------------------------------------------------------- events

MetalEvent::MetalEvent(std::shared_ptr<DeviceShared> d) : d_(std::move(d)) {
  id<MTLSharedEvent> e = [d_->device newSharedEvent];
  if (e == nil) {
    detail::throw_error(
        "[metal] newSharedEvent returned nil; the device may be lost or out of resources, "
        "free events and retry");
  }
  event_ = e;
}

void MetalEvent::signal(uint64_t v) {
  std::lock_guard<std::mutex> lock(mu_);
  if (v <= event_.signaledValue) return;
  event_.signaledValue = v;
}

// Cost: one signaledValue read when the value is already there; otherwise a listener
// notification (a block on the listener's dispatch queue) and a condition-variable wait.
bool MetalEvent::wait(uint64_t target, int64_t timeout_ns) {
  if (event_.signaledValue >= target) return true;
  if (timeout_ns == 0) return false;
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto w = std::make_shared<Waiter>();
  [event_ notifyListener:d_->listener
                 atValue:target
                   block:^(id<MTLSharedEvent> event, uint64_t value) {
                     (void)event;
                     (void)value;
                     {
                       std::lock_guard<std::mutex> lock(w->mu);
                       w->done = true;
                     }
                     w->cv.notify_all();
                   }];
  std::unique_lock<std::mutex> lock(w->mu);
  if (timeout_ns < 0) {
    w->cv.wait(lock, [&] { return w->done; });
    return true;
  }
  w->cv.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return w->done; });
  return w->done || event_.signaledValue >= target;
}

uint64_t MetalEvent::value() const {
  return event_.signaledValue;
}

namespace {

// ---------------------------------------------------------------- discovery

// The process's Metal devices, found once: the system default first, then the others that
// MTLCopyAllDevices lists (eGPUs, the second GPU of a dual-GPU Mac).
struct Discovery {
  std::vector<id<MTLDevice>> devices;
  std::string why;  // why there is none

  Discovery() {
    @autoreleasepool {
      id<MTLDevice> first = MTLCreateSystemDefaultDevice();
      if (first != nil) devices.push_back(first);
      NSArray<id<MTLDevice>>* all = MTLCopyAllDevices();
      for (id<MTLDevice> d in all) {
        const bool known = std::any_of(devices.begin(), devices.end(), [&](id<MTLDevice> x) {
          return x.registryID == d.registryID;
        });
        if (!known) devices.push_back(d);
      }
    }
    if (devices.empty()) {
      why = "[metal] no Metal device was found (MTLCreateSystemDefaultDevice returned nil); run "
            "on a Mac with a Metal GPU (virtual machines and some CI runners expose none) or pick "
            "another backend with MPSRT_BACKEND";
    }
  }
};

// Set once this process has talked to Metal: its driver state does not survive fork().
std::atomic<bool> g_started{false};

Discovery& discovery() {
  static Discovery* d = [] {
    auto* x = new Discovery();  // never destroyed: devices may be open until exit
    g_started.store(true);
    return x;
  }();
  return *d;
}

constexpr size_t kPage = 16384;  // Apple GPU page size; heaps are whole pages

class Device final : public backend::Device {
 public:
  explicit Device(id<MTLDevice> dev) : d_(std::make_shared<DeviceShared>(dev)) {
    DeviceShared& d = *d_;
    d.unified = dev.hasUnifiedMemory;
    d.max_buffer = dev.maxBufferLength;
    d.listener = [[MTLSharedEventListener alloc] init];
    d.create_kernels();

    const char* name = dev.name.UTF8String;
    info_.name = name != nullptr ? name : "Metal device";
    info_.recommended_max_memory = dev.recommendedMaxWorkingSetSize;
    // Unified memory is the machine's memory; a discrete GPU's is what Metal recommends.
    info_.total_memory =
        d.unified ? [NSProcessInfo processInfo].physicalMemory : info_.recommended_max_memory;
    info_.max_buffer_size = d.max_buffer;
    // The memory model (DeviceInfo::unified_memory): every heap here is shared storage the host
    // maps, on a discrete GPU too, so host access aliases it: unified.
    info_.unified_memory = true;
    info_.timestamp_period_ns = 1.0;  // GPUStartTime / GPUEndTime are host seconds
    char details[160];
    std::snprintf(details, sizeof details,
                  "registry=0x%llx, heaps=%s, metal3=%s, allocated_at_open=%llu",
                  static_cast<unsigned long long>(dev.registryID),
                  d.unified ? "placement(shared)" : "buffers(shared)",
                  [dev supportsFamily:MTLGPUFamilyMetal3] ? "yes" : "no",
                  static_cast<unsigned long long>(dev.currentAllocatedSize));
    info_.details = details;

    const auto host = std::chrono::steady_clock::now().time_since_epoch();
    const int64_t host_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(host).count();
    host_offset_ns_ = host_ns - static_cast<int64_t>(device_now_ns());
  }

  const backend::DeviceInfo& info() const noexcept override { return info_; }

  std::unique_ptr<backend::Heap> create_heap(size_t nbytes) override {
    DeviceShared& d = *d_;
    if (nbytes > d.max_buffer) return nullptr;
    size_t size = (std::max<size_t>(nbytes, 1) + kPage - 1) / kPage * kPage;
    if (size > d.max_buffer) return nullptr;
    const MTLResourceOptions options = MTLResourceStorageModeShared |
                                       MTLResourceCPUCacheModeDefaultCache |
                                       MTLResourceHazardTrackingModeTracked;
    @autoreleasepool {
      if (!d.unified) {
        id<MTLBuffer> buf = [d.device newBufferWithLength:size options:options];
        if (buf == nil) return nullptr;
        return std::make_unique<MetalHeap>(d_, nil, buf, size);
      }
      const MTLSizeAndAlign sa = [d.device heapBufferSizeAndAlignWithLength:size options:options];
      MTLHeapDescriptor* desc = [[MTLHeapDescriptor alloc] init];
      desc.type = MTLHeapTypePlacement;
      desc.storageMode = MTLStorageModeShared;
      desc.cpuCacheMode = MTLCPUCacheModeDefaultCache;
      desc.hazardTrackingMode = MTLHazardTrackingModeTracked;
      desc.size = std::max<NSUInteger>(sa.size, size);
      id<MTLHeap> heap = [d.device newHeapWithDescriptor:desc];
      if (heap == nil) return nullptr;  // out of memory
      id<MTLBuffer> buf = [heap newBufferWithLength:size options:options offset:0];
      if (buf == nil) return nullptr;
      heap.label = @"mpsrt heap";
      return std::make_unique<MetalHeap>(d_, heap, buf, size);
    }
  }

  uint64_t driver_allocated_bytes() const noexcept override {
    return d_->held.load(std::memory_order_relaxed);
  }

  std::unique_ptr<backend::Queue> create_queue(int priority) override {
    return make_queue(d_, priority);
  }

  std::unique_ptr<backend::TimelineEvent> create_event() override {
    return std::make_unique<MetalEvent>(d_);
  }

  int64_t host_clock_offset_ns() const noexcept override { return host_offset_ns_; }

  // GPU capture through MTLCaptureManager, into a .gputrace document. Metal offers that
  // destination only when the process started with MTL_CAPTURE_ENABLED=1.
  bool capture_available(std::string* why) const override {
    @autoreleasepool {
      MTLCaptureManager* manager = [MTLCaptureManager sharedCaptureManager];
      if ([manager supportsDestination:MTLCaptureDestinationGPUTraceDocument]) return true;
    }
    if (why != nullptr) {
      *why = "[metal] Metal GPU capture is not enabled; set MTL_CAPTURE_ENABLED=1 in the "
             "environment before the process starts";
    }
    return false;
  }

  void begin_capture(const std::string& path) override {
    @autoreleasepool {
      NSString* file = [NSString stringWithUTF8String:path.c_str()];
      if (file == nil) {
        detail::throw_invalid("[metal] the capture path is not UTF-8; pass a UTF-8 path");
      }
      MTLCaptureDescriptor* desc = [[MTLCaptureDescriptor alloc] init];
      desc.captureObject = d_->device;
      desc.destination = MTLCaptureDestinationGPUTraceDocument;
      desc.outputURL = [NSURL fileURLWithPath:file];
      NSError* error = nil;
      if (![[MTLCaptureManager sharedCaptureManager] startCaptureWithDescriptor:desc
                                                                          error:&error]) {
        fail("starting the GPU capture (startCaptureWithDescriptor) failed", error,
             "pass a path that does not exist yet, in a writable folder");
      }
    }
  }

  void end_capture() override {
    @autoreleasepool {
      MTLCaptureManager* manager = [MTLCaptureManager sharedCaptureManager];
      if (manager.isCapturing) [manager stopCapture];
    }
  }

 private:
  std::shared_ptr<DeviceShared> d_;
  backend::DeviceInfo info_;
  int64_t host_offset_ns_ = 0;
};

class Backend final : public backend::Backend {
 public:
  const char* name() const noexcept override { return "metal"; }
  backend::TraceSink* trace_sink() noexcept override { return signpost_sink(); }
  bool is_built() const noexcept override { return true; }
  bool is_available() noexcept override {
    try {
      return !discovery().devices.empty();
    } catch (...) {
      return false;
    }
  }
  std::string unavailable_reason() override {
    return is_available() ? std::string() : discovery().why;
  }
  bool usable_after_fork() const noexcept override { return !g_started.load(); }
  int device_count() override {
    Discovery& disc = discovery();
    if (disc.devices.empty()) detail::throw_error(disc.why);
    return static_cast<int>(disc.devices.size());
  }
  std::unique_ptr<backend::Device> open_device(int index) override {
    Discovery& disc = discovery();
    if (disc.devices.empty()) detail::throw_error(disc.why);
    if (index < 0 || index >= static_cast<int>(disc.devices.size())) {
      detail::throw_invalid("[metal] no device " + std::to_string(index) + "; there are " +
                            std::to_string(disc.devices.size()));
    }
    return std::make_unique<Device>(disc.devices[static_cast<size_t>(index)]);
  }
};

}  // namespace
}  // namespace mpsrt::metal

namespace mpsrt::backend {
Backend& metal_backend() {
  static metal::Backend b;
  return b;
}
}  // namespace mpsrt::backend
