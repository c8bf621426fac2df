// Queues of the vulkan backend.
//
// A command buffer is a recording of commands (as on cpu); the queue turns it into work when
// it is committed. Each queue has two threads:
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
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "backends/recording.h"
#include "backends/vulkan/vk_common.h"
#include "mpsrt/error.h"

namespace mpsrt::vk {
namespace {

using backend::BufferRef;
using backend::Completion;
using backend::CompletionFn;

constexpr VkDeviceSize kScratchBytes = VkDeviceSize(8) << 20;

using Cmd = backend::RecordedCmd<VkHeap>;
using CommandBuffer = backend::RecordingCommandBuffer<VkHeap>;

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

// What the completion thread reports for one committed command buffer.
struct Job {
  CompletionFn on_complete;
  std::string error;  // set by a failing callback (completion thread)
  bool failed = false;
  bool have_times = false;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t host_start_ns = 0;
};

struct Item {
  enum Kind : uint8_t { kSegment, kSignal, kCallback, kComplete, kStop };
  Kind kind = kStop;
  uint64_t value = 0;  // the queue semaphore's value to reach first
  Segment* seg = nullptr;
  backend::TimelineEvent* event = nullptr;
  uint64_t event_value = 0;
  std::function<void()> fn;
  std::shared_ptr<Job> job;
  std::string error;  // kComplete: a failure of the submit thread
};

class Queue final : public backend::Queue {
 public:
  explicit Queue(std::shared_ptr<DeviceShared> d) : d_(std::move(d)) {
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (submitter_.joinable()) submitter_.join();  // drains, then stops the completer
    if (completer_.joinable()) completer_.join();
    DeviceShared& d = *d_;
    for (auto& s : segments_) {
      if (s->pool) d.fn.vkDestroyQueryPool(d.device, s->pool, nullptr);
    }
    d.fn.vkDestroyCommandPool(d.device, pool_, nullptr);  // frees the command buffers
    d.fn.vkDestroySemaphore(d.device, timeline_, nullptr);
    release(d, scratch_);
  }

  std::unique_ptr<backend::CommandBuffer> create_command_buffer() override {
    return std::make_unique<CommandBuffer>();
  }

  // Cost: a lock, a deque push and a condition-variable notify.
  void commit(std::unique_ptr<backend::CommandBuffer> cb, CompletionFn on_complete) override {
    std::unique_ptr<CommandBuffer> c(static_cast<CommandBuffer*>(cb.release()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!submitter_.joinable()) {
        submitter_ = std::thread([this] { submit_loop(); });
        completer_ = std::thread([this] { complete_loop(); });
      }
      pending_.emplace_back(std::move(c), std::move(on_complete));
    }
    cv_.notify_all();
  }

 private:
  // ---------------------------------------------------------------- submit thread

  void submit_loop() {
    pthread_setname_np(pthread_self(), "mpsrt-vk-submit");
    for (;;) {
      std::pair<std::unique_ptr<CommandBuffer>, CompletionFn> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) break;  // stop_ and drained
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      process(*next.first, std::move(next.second));
    }
    Item stop;
    stop.kind = Item::kStop;
    stop.value = submitted_;
    push(std::move(stop));
  }

  void process(CommandBuffer& cb, CompletionFn on_complete) {
    auto job = std::make_shared<Job>();
    job->on_complete = std::move(on_complete);
    job->host_start_ns = d_->device_now_ns();
    uint32_t timestamps = 0;
    for (const Cmd& c : cb.cmds) timestamps += c.kind == Cmd::kTimestamp ? 1 : 0;
    Segment* seg = nullptr;
    std::vector<std::pair<backend::TimelineEvent*, uint64_t>> signals;  // at the segment's end
    bool failed = false;
    std::string submit_error;  // a driver failure while recording or submitting
    auto open = [&] {
      if (seg == nullptr) seg = begin_segment(timestamps + 2);
    };
    auto close = [&] {
      if (seg != nullptr) {
        end_segment(seg, job);
        seg = nullptr;
      }
      for (auto& s : signals) push_signal(s.first, s.second);
      signals.clear();
    };
    // The signals that end the command buffer are set after its completion is reported.
    const size_t trailing = backend::trailing_signals(cb.cmds);
    std::vector<std::pair<backend::TimelineEvent*, uint64_t>> after_completion;
    try {
      for (size_t i = 0; i < cb.cmds.size(); ++i) {
        Cmd& c = cb.cmds[i];
        switch (c.kind) {
          case Cmd::kFill:
          case Cmd::kCopy:
          case Cmd::kRandom:
            if (failed) break;
            open();
            record(*seg, c);
            break;
          case Cmd::kTimestamp:
            open();
            d_->fn.vkCmdWriteTimestamp(seg->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, seg->pool,
                                       seg->used++);
            seg->outs.push_back(c.out);
            break;
          case Cmd::kSignal:
            if (i >= trailing) {
              after_completion.emplace_back(c.event, c.value);
              break;
            }
            signals.emplace_back(c.event, c.value);
            if (seg == nullptr) close();
            break;
          case Cmd::kWait:
            close();
            c.event->wait(c.value, -1);
            break;
          case Cmd::kCallback: {
            if (failed) break;
            close();
            Item it;
            it.kind = Item::kCallback;
            it.value = submitted_;
            it.fn = std::move(c.fn);
            it.job = job;
            const uint64_t ticket = ++callbacks_sent_;
            push(std::move(it));
            std::unique_lock<std::mutex> lock(cb_mu_);
            cb_cv_.wait(lock, [&] { return callbacks_done_ >= ticket; });
            failed = job->failed;
            break;
          }
        }
      }
      close();
    } catch (const std::exception& e) {
      // A driver failure while recording or submitting: report it on this command buffer
      // and still run its signals, so that nobody waiting on them hangs.
      if (seg != nullptr) {
        d_->fn.vkEndCommandBuffer(seg->cb);
        recycle(seg);
        seg = nullptr;
      }
      submit_error = e.what();
      close();
    }
    cb.cmds.clear();  // drops what the commands hold before completion is reported
    Item done;
    done.kind = Item::kComplete;
    done.value = submitted_;
    done.error = std::move(submit_error);
    done.job = std::move(job);
    push(std::move(done));
    for (auto& s : after_completion) push_signal(s.first, s.second);
  }

  // The completion thread sets the event once the work pushed before it is done.
  void push_signal(backend::TimelineEvent* event, uint64_t value) {
    Item it;
    it.kind = Item::kSignal;
    it.value = submitted_;
    it.event = event;
    it.event_value = value;
    push(std::move(it));
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

  void end_segment(Segment* s, const std::shared_ptr<Job>& job) {
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
    it.kind = Item::kSegment;
    it.value = value;
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
    Recorder r{*d_, s.cb, scratch_.buffer, scratch_.size};
    if (s.pending_barrier) r.barrier();
    switch (c.kind) {
      case Cmd::kFill:
        if (c.n > 0) r.fill(c.dst->buffer(), c.dst->size(), c.dst_off, c.n, c.value);
        break;
      case Cmd::kCopy:
        r.copy(c.src->buffer(), c.src_off, c.dst->buffer(), c.dst_off, c.n);
        break;
      case Cmd::kRandom:
        r.random(c.dst->buffer(), c.dst->size(), c.dst_off, *c.random);
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

  void push(Item it) {
    {
      std::lock_guard<std::mutex> lock(items_mu_);
      items_.push_back(std::move(it));
    }
    items_cv_.notify_one();
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

  void complete_loop() {
    pthread_setname_np(pthread_self(), "mpsrt-vk-done");
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lock(items_mu_);
        items_cv_.wait(lock, [&] { return !items_.empty(); });
        it = std::move(items_.front());
        items_.pop_front();
      }
      if (it.kind == Item::kStop) {
        reach(it.value);
        return;
      }
      try {
        reach(it.value);
      } catch (const std::exception& e) {
        if (it.job && it.job->error.empty()) it.job->error = e.what();
      }
      switch (it.kind) {
        case Item::kSegment:
          finish_segment(it.seg, *it.job);
          break;
        case Item::kSignal:
          it.event->signal(it.event_value);
          break;
        case Item::kCallback:
          run_callback(it.fn, *it.job);
          break;
        case Item::kComplete:
          if (!it.error.empty() && it.job->error.empty()) it.job->error = it.error;
          report(*it.job);
          break;
        case Item::kStop:
          break;
      }
    }
  }

  void finish_segment(Segment* s, Job& job) {
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

  void run_callback(std::function<void()>& fn, Job& job) {
    if (!job.failed) {
      try {
        fn();
      } catch (const std::exception& e) {
        job.error = std::string("host callback raised: ") + e.what();
        job.failed = true;
      } catch (...) {
        job.error = "host callback raised an unknown exception";
        job.failed = true;
      }
    }
    fn = nullptr;  // drops what it holds before the submit thread goes on
    {
      std::lock_guard<std::mutex> lock(cb_mu_);
      ++callbacks_done_;
    }
    cb_cv_.notify_all();
  }

  void report(Job& job) {
    Completion c;
    c.error = job.error;
    if (job.have_times) {
      c.device_start_ns = job.start_ns;
      c.device_end_ns = std::max(job.end_ns, job.start_ns);
    } else {
      c.device_start_ns = job.host_start_ns;
      c.device_end_ns = std::max(d_->device_now_ns(), job.host_start_ns);
    }
    CompletionFn fn = std::move(job.on_complete);
    if (fn) fn(c);
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
  uint64_t callbacks_sent_ = 0;

  // Completion thread only.
  uint64_t reached_ = 0;

  std::mutex mu_;  // pending_, stop_, thread start
  std::condition_variable cv_;
  std::deque<std::pair<std::unique_ptr<CommandBuffer>, CompletionFn>> pending_;
  bool stop_ = false;

  std::mutex items_mu_;
  std::condition_variable items_cv_;
  std::deque<Item> items_;

  std::mutex free_mu_;
  std::vector<Segment*> free_;

  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  uint64_t callbacks_done_ = 0;

  std::thread submitter_;
  std::thread completer_;
};

}  // namespace

std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d) {
  return std::make_unique<Queue>(std::move(d));
}

}  // namespace mpsrt::vk
