// Queues of the metal backend.
//
// A command buffer is a recording of commands (as on cpu and vulkan); the queue turns it into
// MTLCommandBuffers ("segments") when it is committed, on the two threads of gpu_queue.h's
// skeleton:
//
//  - the submit thread takes committed command buffers in order and walks their commands.
//    Fills, copies and random fills are encoded into the open segment; an event wait is
//    encoded there too (encodeWaitForEvent:value:, so only this queue's later work waits). A
//    timestamp() ends the segment (its value is the segment's GPUEndTime), or, with no open
//    segment, takes the GPUStartTime of the next one. A host callback ends the segment: it is
//    handed to the completion thread and the submit thread waits until it has run (later
//    commands must not start before it, and they are skipped if it throws).
//  - the completion thread takes, in order, what must happen once the device has finished a
//    segment: read its GPUStartTime / GPUEndTime and status (recorded by the segment's
//    completed handler), signal an event from the host (so an event's value never decreases),
//    run a host callback, report a command buffer's completion.
//
// Segments of one MTLCommandQueue execute in commit order, and the heaps' tracked hazards
// order the commands that touch the same buffer.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/cpu/simd_ops.h"
#include "backends/gpu_queue.h"
#include "backends/metal/metal_common.h"
#include "mpsrt/error.h"

namespace mpsrt::metal {
namespace {

using backend::GpuJob;

constexpr uint64_t kScratchBytes = uint64_t(8) << 20;

// One MTLCommandBuffer. Its completed handler records the device times and the status, and
// wakes the completion thread.
struct Segment {
  id<MTLCommandBuffer> cb = nil;
  std::vector<uint64_t*> start_outs;  // timestamps that take GPUStartTime
  std::vector<uint64_t*> end_outs;    // timestamps that take GPUEndTime
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  std::string error;
};

class Queue final : public backend::GpuQueue<Queue, MetalHeap, std::shared_ptr<Segment>> {
 public:
  Queue(std::shared_ptr<DeviceShared> d, int priority)
      : GpuQueue("mpsrt-mtl-submit", "mpsrt-mtl-done"), d_(std::move(d)) {
    (void)priority;  // Metal command queues have no priority
    id<MTLCommandQueue> q = [d_->device newCommandQueue];
    if (q == nil) {
      detail::throw_error(
          "[metal] newCommandQueue returned nil; too many streams are open, use fewer");
    }
    q.label = @"mpsrt stream";
    queue_ = q;
  }

  ~Queue() override { stop(); }

 private:
  friend GpuQueue;

  // ---------------------------------------------------------------- submit thread

  template <class F>
  void scope(F&& f) {
    @autoreleasepool {
      f();
    }
  }
  uint64_t now_ns() const { return device_now_ns(); }
  uint64_t order() const { return 0; }  // segments complete in commit order

  // The walker of gpu_queue.h's walk: one open segment at a time. An event wait is encoded
  // in it (only this queue's later work waits); a timestamp ends it, or, with no open segment,
  // takes the start of the next one; a host callback ends it.
  struct Walker {
    Queue& q;
    const std::shared_ptr<GpuJob>& job;
    std::shared_ptr<Segment> seg;
    std::vector<uint64_t*> unbound;  // timestamps waiting for the next segment's start

    bool is_open() const { return seg != nullptr; }
    void open() {
      if (seg == nullptr) {
        seg = q.begin_segment();
        seg->start_outs.swap(unbound);
      }
    }
    void data(Cmd& c) {
      if (c.kind == Cmd::kRandom && c.random->dtype == backend::RandomDType::F64) {
        q.host_random(c, *this);
        return;
      }
      open();
      q.encode(*seg, c);
    }
    template <class Close>
    void timestamp(Cmd& c, Close& close) {
      if (seg != nullptr) {
        seg->end_outs.push_back(c.out);
        close();
      } else {
        unbound.push_back(c.out);
      }
    }
    template <class Close>
    void wait(Cmd& c, Close&) {
      open();
      [seg->cb encodeWaitForEvent:static_cast<MetalEvent*>(c.event)->event() value:c.value];
    }
    void last() {}
    void end() {
      if (seg != nullptr) q.end_segment(std::exchange(seg, nullptr), job);
    }
    // Timestamps with no segment after them take the time the completion thread reaches them.
    void settle() {
      for (uint64_t* out : unbound) {
        Item it;
        it.kind = Item::kTimestamp;
        it.out = out;
        q.push(std::move(it));
      }
      unbound.clear();
    }
    void abandon() { end(); }  // a failure while encoding: the segment still completes
  };

  void process(CommandBuffer& cb, const std::shared_ptr<GpuJob>& job) {
    Walker w{*this, job, nullptr, {}};
    walk(cb, job, w);
  }

  std::shared_ptr<Segment> begin_segment() {
    auto seg = std::make_shared<Segment>();
    id<MTLCommandBuffer> cb = [queue_ commandBuffer];
    if (cb == nil) {
      detail::throw_error("[metal] commandBuffer returned nil; the device may be lost, restart");
    }
    cb.label = @"mpsrt";
    std::shared_ptr<Segment> keep = seg;  // the handler's own reference
    [cb addCompletedHandler:^(id<MTLCommandBuffer> done) {
      const uint64_t start = seconds_to_ns(done.GPUStartTime);
      const uint64_t end = seconds_to_ns(done.GPUEndTime);
      std::string error;
      if (done.status == MTLCommandBufferStatusError) {
        error = "[metal] a command buffer failed on the device: " + describe(done.error);
      }
      {
        std::lock_guard<std::mutex> lock(keep->mu);
        keep->start_ns = start;
        keep->end_ns = end;
        keep->error = std::move(error);
        keep->done = true;
      }
      keep->cv.notify_all();
    }];
    seg->cb = cb;
    return seg;
  }

  void end_segment(const std::shared_ptr<Segment>& seg, const std::shared_ptr<GpuJob>& job) {
    [seg->cb commit];
    Item it;
    it.kind = Item::kSegment;
    it.seg = seg;
    it.job = job;
    push(std::move(it));
  }

  void ensure_scratch() {
    if (scratch_ != nil) return;
    id<MTLBuffer> s = [d_->device
        newBufferWithLength:kScratchBytes
                    options:MTLResourceStorageModePrivate | MTLResourceHazardTrackingModeTracked];
    if (s == nil) detail::throw_oom("[metal] could not allocate the queue's 8 MiB scratch buffer");
    scratch_ = s;
  }

  // A float64 random fill (Metal has no float64 arithmetic; the kernels have no float64 path):
  // the open segment is committed and waited for, then the cpu backend's kernel writes the
  // elements into the buffer's shared memory on this thread, before any later command is
  // encoded. Bit-identical to the cpu backend. Cost: the device drains once per float64 fill.
  void host_random(const Cmd& c, Walker& w) {
    std::shared_ptr<Segment> s = w.seg;
    w.end();
    if (s != nullptr) {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return s->done; });
    }
    auto* base = static_cast<uint8_t*>([c.dst->buffer() contents]);
    if (base == nullptr) detail::throw_error("[metal] a float64 random fill needs shared memory");
    cpu::random_scalar(base + c.dst_off, *c.random, 0, c.random->count);
  }

  void encode(Segment& s, const Cmd& c) {
    const bool overlap = c.kind == Cmd::kCopy && c.src == c.dst && c.src_off != c.dst_off &&
                         c.src_off < c.dst_off + c.n && c.dst_off < c.src_off + c.n;
    // Random fills of 4- or 8-byte elements at offsets that are not 4-byte aligned.
    const bool unaligned =
        c.kind == Cmd::kRandom && c.dst_off % 4 != 0 && dtype_size(c.random->dtype) >= 4;
    if (overlap || unaligned) ensure_scratch();
    Encoder e{*d_, s.cb, scratch_, kScratchBytes};
    switch (c.kind) {
      case Cmd::kFill:
        e.fill(c.dst->buffer(), c.dst_off, c.n, c.value);
        break;
      case Cmd::kCopy:
        e.copy(c.src->buffer(), c.src_off, c.dst->buffer(), c.dst_off, c.n);
        break;
      case Cmd::kRandom:
        e.random(c.dst->buffer(), c.dst_off, *c.random);
        break;
      default:
        break;
    }
  }

  // ---------------------------------------------------------------- completion thread

  void before(const Item&) {}  // segments complete in order: finish_segment waits for each

  // Waits for the segment's completed handler; an empty or unscheduled command buffer may
  // report no device times, then the host clock stands in.
  void finish_segment(const std::shared_ptr<Segment>& seg, GpuJob& job) {
    Segment& s = *seg;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait(lock, [&] { return s.done; });
    }
    const uint64_t now = device_now_ns();
    const uint64_t end = s.end_ns != 0 ? s.end_ns : now;
    const uint64_t start = s.start_ns != 0 ? std::min(s.start_ns, end) : end;
    for (uint64_t* out : s.start_outs) *out = start;
    for (uint64_t* out : s.end_outs) *out = end;
    if (!job.have_times) job.start_ns = start;
    job.end_ns = end;
    job.have_times = true;
    if (!s.error.empty() && job.error.empty()) job.error = s.error;
    s.cb = nil;
  }

  std::shared_ptr<DeviceShared> d_;
  id<MTLCommandQueue> queue_ = nil;

  id<MTLBuffer> scratch_ = nil;  // submit thread only
};

}  // namespace

std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d, int priority) {
  return std::make_unique<Queue>(std::move(d), priority);
}

}  // namespace mpsrt::metal
