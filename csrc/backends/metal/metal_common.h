// Internals of the metal backend, shared by its Objective-C++ translation units (ARC). Nothing
// here is seen outside csrc/backends/metal/: backend.h stays free of Objective-C types.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.h"

namespace mpsrt::metal {

/// "what happened" from an NSError (its localizedDescription), or "unknown error" for nil.
std::string describe(NSError* error);
/// Throws mpsrt::Error "[metal] <what>: <error>; <todo>".
[[noreturn]] void fail(const std::string& what, NSError* error, const char* todo);

/// Nanoseconds of mach_absolute_time(), the clock of MTLCommandBuffer's GPUStartTime /
/// GPUEndTime (seconds) and so the backend's device clock.
uint64_t device_now_ns() noexcept;
/// A CFTimeInterval of that clock in nanoseconds (0 stays 0).
uint64_t seconds_to_ns(double seconds) noexcept;

// Push constants of the runtime kernels (csrc/kernels/runtime/*.comp, translated to MSL by
// SPIRV-Cross at build time): the std430 push-constant block of each, which SPIRV-Cross binds as
// `constant Params& pc [[buffer(0)]]`; storage-buffer binding i is [[buffer(i + 1)]]. Offsets
// are bytes inside a window: the buffer bound at a 16-byte aligned offset, at most kWindow long.

/// fill.comp's Params.
struct FillPush {
  uint32_t first;   // window byte offset of the first byte to write
  uint32_t end;     // one past the last
  uint32_t pat[2];  // pattern bytes 0..3 and 4..7 for a window byte at an offset 0 mod 8
};
static_assert(sizeof(FillPush) == 16, "fill.comp push constants");

/// copy.comp's Params.
struct CopyPush {
  uint32_t src;  // source window byte offset
  uint32_t dst;  // destination window byte offset
  uint32_t n;    // bytes
};
static_assert(sizeof(CopyPush) == 12, "copy.comp push constants");

/// random.comp's Params (its float64-free build: da / db are bytes it does not read).
struct RandomPush {
  uint64_t da, db;
  uint32_t seed[2], block0[2], low[2], range[2], thresh[2];
  uint32_t nblocks, e_lo, e_hi, dst_off;
  float fa, fb;
};
static_assert(sizeof(RandomPush) == 80, "random.comp push constants");

/// What the device, its heaps, queues and events share. Owned through shared_ptr so that the
/// MTLDevice and the pipelines outlive the last object that uses them.
struct DeviceShared {
  id<MTLDevice> device;
  bool unified = false;
  uint64_t max_buffer = 0;
  std::atomic<uint64_t> held{0};  // bytes of the heaps (create_heap) now alive

  // Kernels (metal_kernels.mm).
  id<MTLLibrary> random_library = nil;
  id<MTLComputePipelineState> fill_pipeline = nil;
  id<MTLComputePipelineState> copy16_pipeline = nil;  // source and destination agree mod 16
  id<MTLComputePipelineState> copy4_pipeline = nil;   // mod 4
  id<MTLComputePipelineState> copy1_pipeline = nil;   // any offsets
  std::mutex pipelines_mu;
  std::map<uint32_t, id<MTLComputePipelineState>> random_pipelines;

  // Host waits on events (metal_backend.mm): notifications run on this listener's queue.
  MTLSharedEventListener* listener = nil;

  explicit DeviceShared(id<MTLDevice> d) : device(d) {}
  DeviceShared(const DeviceShared&) = delete;
  DeviceShared& operator=(const DeviceShared&) = delete;

  /// Compiles the translated kernels and builds the fill and copy pipelines (at device open).
  void create_kernels();
  /// The random pipeline for p's op and dtype, built on first use and cached.
  id<MTLComputePipelineState> random_pipeline(const backend::RandomParams& p);
};

/// A heap: on unified memory an MTLHeap (shared storage, placement, tracked hazards) with one
/// MTLBuffer placed at offset 0 over all of it; elsewhere one shared-storage MTLBuffer (macOS
/// offers heaps only in private storage there, which the host cannot map). The core places its
/// buffers at offsets inside `buffer`.
class MetalHeap final : public backend::Heap {
 public:
  MetalHeap(std::shared_ptr<DeviceShared> d, id<MTLHeap> heap, id<MTLBuffer> buffer, size_t size);
  ~MetalHeap() override;
  size_t size() const noexcept override { return size_; }
  void* host_ptr() const noexcept override { return host_; }
  id<MTLBuffer> buffer() const noexcept { return buffer_; }

 private:
  std::shared_ptr<DeviceShared> d_;
  id<MTLHeap> heap_;
  id<MTLBuffer> buffer_;
  size_t size_;
  void* host_;
};

/// A timeline event: an MTLSharedEvent. Device signals are made from the host (the queues'
/// completion threads, in order), so the value never decreases; device waits are encoded into
/// command buffers (encodeWaitForEvent:value:).
class MetalEvent final : public backend::TimelineEvent {
 public:
  explicit MetalEvent(std::shared_ptr<DeviceShared> d);
  void signal(uint64_t value) override;
  bool wait(uint64_t target, int64_t timeout_ns) override;
  uint64_t value() const override;
  id<MTLSharedEvent> event() const noexcept { return event_; }

 private:
  std::shared_ptr<DeviceShared> d_;
  id<MTLSharedEvent> event_;
  std::mutex mu_;
};

/// Encodes kernels into a command buffer (metal_kernels.mm). Each call uses its own encoder;
/// the heaps' tracked hazards order encoders that touch the same buffer.
struct Encoder {
  DeviceShared& d;
  id<MTLCommandBuffer> cb;
  /// A private buffer the encoder may use to stage overlapping copies.
  id<MTLBuffer> scratch;
  uint64_t scratch_bytes;

  void fill(id<MTLBuffer> buf, uint64_t offset, uint64_t n, uint64_t pattern8) const;
  void copy(id<MTLBuffer> src, uint64_t src_off, id<MTLBuffer> dst, uint64_t dst_off,
            uint64_t n) const;
  /// A copy between ranges that do not overlap.
  void direct_copy(id<MTLBuffer> s, uint64_t so, id<MTLBuffer> t, uint64_t to, uint64_t n) const;
  void random(id<MTLBuffer> buf, uint64_t offset, const backend::RandomParams& p) const;
};

/// True when the kernels implement op with this output dtype (mpsrt::random_supported()).
using backend::random_supported;

/// Queues (metal_queue.mm).
std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d, int priority);

/// The os_signpost sink (metal_signpost.mm): the backend's trace_sink().
backend::TraceSink* signpost_sink();

}  // namespace mpsrt::metal
