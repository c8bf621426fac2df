// Queues of the vulkan backend.
//
// A command buffer is a recording of commands (as on cpu); the queue turns it into work when
// it is committed, on the two threads of gpu_queue.h's skeleton:
//
//  - the submit thread takes committed command buffers in order and walks their commands.
//    Fills, copies, random fills and timestamps are recorded into a VkCommandBuffer (a
//    "segment"), which is submitted to the VkQueue with a signal of the queue's own timeline
//    semaphore. A host callback or an event wait ends the segment: a callback is handed to
//    the completion thread and the submit thread waits until it has run (later commands must
//    not start before it); an event wait blocks the submit thread until the value is reached.
//    Event waits are never put on the VkQueue: streams share VkQueues (lavapipe has one), and
//    a wait there would stall every stream behind it.
//  - the completion thread takes, in order, what must happen once the device has reached a
//    value of the queue's semaphore: read a segment's timestamps and recycle it, signal an
//    event (signals run on the host, so an event's value never decreases), run a host
//    callback, report a command buffer's completion.
//
// So segments of later command buffers are submitted while earlier ones still run, and a
// completion costs no device idle time. Every segment starts with a full memory barrier,
// which orders it after everything submitted earlier to the same VkQueue.
//
// A host callback that throws fails its command buffer as on cpu: the later fills, copies and
// random fills of that command buffer are skipped, but signals, waits and timestamps still
// happen, so nobody waiting on them hangs.
#include <algorithm>
#include <thread>
#include <utility>

#include "backends/gpu_queue.h"
#include "backends/vulkan/vk_common.h"
#include "mpsrt/error.h"

namespace mpsrt::vk {
namespace {

using backend::CompletionFn;
using backend::GpuJob;

constexpr VkDeviceSize kScratchBytes = VkDeviceSize(8) << 20;

// One VkCommandBuffer with its timestamp queries: query 0 is the segment's start, the last
// one its end, those between are timestamp() commands (outs).
struct Segment {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkQueryPool pool = VK_NULL_HANDLE;
  uint32_t capacity = 0;
  uint32_t used = 0;
  std::vector<uint64_t*> outs;
  bool pending_barrier = false;  // a data command was recorded since the last barrier
};

class Queue final : public backend::GpuQueue<Queue, VkHeap, Segment*> {
 public:
  explicit Queue(std::shared_ptr<DeviceShared> d)
      : GpuQueue("mpsrt-vk-submit", "mpsrt-vk-done"), d_(std::move(d)) {
    DeviceShared& d0 = *d_;
    const uint32_t qi = d0.next_queue.fetch_add(1) % static_cast<uint32_t>(d0.queues.size());
    vk_queue_ = d0.queues[qi];
    queue_mu_ = &d0.queue_mutexes[qi];
    auto ti = make<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    auto si = make<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
    si.pNext = &ti;
    check(d0.fn.vkCreateSemaphore(d0.device, &si, nullptr, &timeline_), "vkCreateSemaphore");
    auto pi = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = d0.family;
    const VkResult r = d0.fn.vkCreateCommandPool(d0.device, &pi, nullptr, &pool_);
    if (r != VK_SUCCESS) {
      d0.fn.vkDestroySemaphore(d0.device, timeline_, nullptr);
      fail("vkCreateCommandPool", r);
    }
  }

  ~Queue() override {
    stop();
    DeviceShared& d = *d_;
    for (auto& s : segments_) {
      if (s->pool) d.fn.vkDestroyQueryPool(d.device, s->pool, nullptr);
    }
    d.fn.vkDestroyCommandPool(d.device, pool_, nullptr);  // frees the command buffers
    d.fn.vkDestroySemaphore(d.device, timeline_, nullptr);
    release(d, scratch_);
  }

 private:
  friend GpuQueue;

  // ---------------------------------------------------------------- submit thread

  template <class F>
  void scope(F&& f) {
    f();
  }
  uint64_t now_ns() const { return d_->device_now_ns(); }
  uint64_t order() const { return submitted_; }

  // The walker of gpu_queue.h's walk: one open segment at a time. A host callback or an event
  // wait ends it; a wait blocks this thread, never the VkQueue (streams share VkQueues).
  struct Walker {
    Queue& q;
    const std::shared_ptr<GpuJob>& job;
    uint32_t queries;  // per segment: the command buffer's timestamps, its start and its end
    Segment* seg = nullptr;

    bool is_open() const { return seg != nullptr; }
    void open() {
      if (seg == nullptr) seg = q.begin_segment(queries);
    }
    void data(Cmd& c) {
      open();
      q.record(*seg, c);
    }
    template <class Close>
    void timestamp(Cmd& c, Close&) {
      open();
      q.d_->fn.vkCmdWriteTimestamp(seg->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, seg->pool,
                                   seg->used++);
      seg->outs.push_back(c.out);
    }
    template <class Close>
    void wait(Cmd& c, Close& close) {
      close();
      c.event->wait(c.value, -1);
    }
    void end() {
      if (seg != nullptr) q.end_segment(std::exchange(seg, nullptr), job);
    }
    void settle() {}
    void abandon() {  // a driver failure while recording or submitting
      if (seg != nullptr) {
        q.d_->fn.vkEndCommandBuffer(seg->cb);
        q.recycle(std::exchange(seg, nullptr));
      }
    }
  };

  void process(CommandBuffer& cb, const std::shared_ptr<GpuJob>& job) {
    uint32_t timestamps = 0;
    for (const Cmd& c : cb.cmds) timestamps += c.kind == Cmd::kTimestamp ? 1 : 0;
    Walker w{*this, job, timestamps + 2};
    walk(cb, job, w);
  }

  Segment* begin_segment(uint32_t queries) {
    DeviceShared& d = *d_;
    Segment* s = nullptr;
    {
      std::lock_guard<std::mutex> lock(free_mu_);
      if (!free_.empty()) {
        s = free_.back();
        free_.pop_back();
      }
    }
    if (s == nullptr) {
      segments_.push_back(std::make_unique<Segment>());
      s = segments_.back().get();
      auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
      ai.commandPool = pool_;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      check(d.fn.vkAllocateCommandBuffers(d.device, &ai, &s->cb), "vkAllocateCommandBuffers");
    }
    if (s->capacity < queries) {
      if (s->pool) d.fn.vkDestroyQueryPool(d.device, s->pool, nullptr);
      s->pool = VK_NULL_HANDLE;
      s->capacity = 0;
      auto qi = make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = std::max<uint32_t>(queries, 8);
      check(d.fn.vkCreateQueryPool(d.device, &qi, nullptr, &s->pool), "vkCreateQueryPool");
      s->capacity = qi.queryCount;
    }
    s->used = 0;
    s->outs.clear();
    s->pending_barrier = false;
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(d.fn.vkBeginCommandBuffer(s->cb, &bi), "vkBeginCommandBuffer");
    d.fn.vkCmdResetQueryPool(s->cb, s->pool, 0, s->capacity);
    // Orders this segment after everything submitted to the VkQueue before it.
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
    d.fn.vkCmdPipelineBarrier(s->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                              VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, nullptr, 0,
                              nullptr);
    d.fn.vkCmdWriteTimestamp(s->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->pool, s->used++);
    return s;
  }

  void end_segment(Segment* s, const std::shared_ptr<GpuJob>& job) {
    DeviceShared& d = *d_;
    // Makes the device's writes visible to the host once the semaphore is reached.
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT;
    d.fn.vkCmdPipelineBarrier(s->cb,
                              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                              VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    d.fn.vkCmdWriteTimestamp(s->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->pool, s->used++);
    check(d.fn.vkEndCommandBuffer(s->cb), "vkEndCommandBuffer");
    const uint64_t value = submitted_ + 1;
    auto ti = make<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = &value;
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.pNext = &ti;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &s->cb;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &timeline_;
    VkResult r;
    {
      std::lock_guard<std::mutex> lock(*queue_mu_);
      r = d.fn.vkQueueSubmit(vk_queue_, 1, &si, VK_NULL_HANDLE);
    }
    if (r != VK_SUCCESS) {
      recycle(s);
      fail("vkQueueSubmit", r);
    }
    submitted_ = value;
    Item it;
    it.kind = Item::kSegment;  // value: submitted_
    it.seg = s;
    it.job = job;
    push(std::move(it));
  }

  void ensure_scratch() {
    if (scratch_.buffer != VK_NULL_HANDLE) return;
    if (!allocate(*d_, kScratchBytes, &scratch_)) {
      detail::throw_oom("[vulkan] could not allocate the queue's 8 MiB scratch buffer");
    }
  }

  void record(Segment& s, const Cmd& c) {
    const bool needs_scratch =
        (c.kind == Cmd::kCopy && c.src == c.dst && c.src_off != c.dst_off &&
         c.src_off < c.dst_off + c.n && c.dst_off < c.src_off + c.n) ||
        (c.kind == Cmd::kRandom && c.dst_off % backend::random_element_size(c.random->dtype) != 0);
    if (needs_scratch) ensure_scratch();
    Recorder r{*d_, s.cb, scratch_};
    if (s.pending_barrier) r.barrier();
    switch (c.kind) {
      case Cmd::kFill:
        if (c.n > 0) r.fill(c.dst->allocation(), c.dst_off, c.n, c.value);
        break;
      case Cmd::kCopy:
        // Staging (host) memory is read and written by the transfer path, not by kernels.
        r.copy(c.src->allocation(), c.src_off, c.dst->allocation(), c.dst_off, c.n,
               c.src->staging() || c.dst->staging());
        break;
      case Cmd::kRandom:
        r.random(c.dst->allocation(), c.dst_off, *c.random);
        break;
      default:
        break;
    }
    s.pending_barrier = true;
  }

  void recycle(Segment* s) {
    std::lock_guard<std::mutex> lock(free_mu_);
    free_.push_back(s);
  }

  // ---------------------------------------------------------------- completion thread

  // Waits until the queue's semaphore reaches v: polls for a short while (a blocking wait
  // costs ~100 us on lavapipe against ~25 us polling), then blocks.
  void reach(uint64_t v) {
    DeviceShared& d = *d_;
    uint64_t cur = 0;
    if (reached_ >= v) return;
    const int64_t deadline = host_now_ns() + 50'000;
    do {
      check(d.fn.vkGetSemaphoreCounterValue(d.device, timeline_, &cur),
            "vkGetSemaphoreCounterValue");
      if (cur >= v) {
        reached_ = cur;
        return;
      }
      std::this_thread::yield();
    } while (host_now_ns() < deadline);
    auto wi = make<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline_;
    wi.pValues = &v;
    check(d.fn.vkWaitSemaphores(d.device, &wi, UINT64_MAX), "vkWaitSemaphores");
    reached_ = v;
  }

  void before(const Item& it) { reach(it.value); }

  void finish_segment(Segment* s, GpuJob& job) {
    DeviceShared& d = *d_;
    uint64_t ticks[64];
    std::vector<uint64_t> many;
    uint64_t* t = ticks;
    if (s->used > 64) {
      many.resize(s->used);
      t = many.data();
    }
    const VkResult r = d.fn.vkGetQueryPoolResults(
        d.device, s->pool, 0, s->used, sizeof(uint64_t) * s->used, t, sizeof(uint64_t),
        VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_SUCCESS) {
      auto ns = [&](uint32_t i) {
        return static_cast<uint64_t>(static_cast<double>(t[i] & d.timestamp_mask) *
                                     d.timestamp_period);
      };
      for (size_t i = 0; i < s->outs.size(); ++i) *s->outs[i] = ns(static_cast<uint32_t>(i + 1));
      if (!job.have_times) job.start_ns = ns(0);
      job.end_ns = ns(s->used - 1);
      job.have_times = true;
    } else if (job.error.empty()) {
      job.error = std::string("[vulkan] vkGetQueryPoolResults failed: ") + result_name(r);
    }
    recycle(s);
  }

  std::shared_ptr<DeviceShared> d_;
  VkQueue vk_queue_ = VK_NULL_HANDLE;
  std::mutex* queue_mu_ = nullptr;
  VkSemaphore timeline_ = VK_NULL_HANDLE;

  // Submit thread only.
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<Segment>> segments_;
  Allocation scratch_;
  uint64_t submitted_ = 0;

  // Completion thread only.
  uint64_t reached_ = 0;

  std::mutex free_mu_;
  std::vector<Segment*> free_;
};

}  // namespace

std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d) {
  return std::make_unique<Queue>(std::move(d));
}

}  // namespace mpsrt::vk
