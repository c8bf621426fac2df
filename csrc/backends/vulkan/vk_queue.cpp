// Queues of the vulkan backend.
//
// A command buffer is a recording of commands (as on cpu); the queue turns it into work when
// it is committed, through gpu_queue.h's skeleton: a walk over its commands, on the committing
// thread when nothing can block (walks_inline: no host callback, no wait for an event not yet
// reached, nothing earlier still queued), else on the queue's submit thread.
//
//  - A walk records fills, copies, random fills and timestamps into a VkCommandBuffer (a
//    "segment"), which is submitted to the VkQueue with a signal of the queue's own segment
//    semaphore. A host callback or an event wait ends the segment: a callback is handed to the
//    completion thread and the walk waits until it has run (later commands must not start
//    before it); an event wait blocks the walk until the value is reached. Event waits are
//    never put on the VkQueue: streams may share VkQueues (lavapipe has one), and a wait there
//    would stall every stream behind it.
//  - The queue's completion timeline (backend::Queue::timeline, the stream's completion event)
//    is a second timeline semaphore whose value n means "the n-th command buffer is done". The
//    submission that ends command buffer n signals it on the device, so a host that waits for
//    a stream waits for the device directly (Semaphore::wait: poll, then vkWaitSemaphores): no
//    runtime thread between the device and the waiter. Where the core needs its on_complete
//    to run first (a profiled command buffer), the completion thread sets the timeline from the
//    host after running it; until that has happened, later command buffers take the same host
//    path, so the timeline's signals stay in increasing order (Vulkan requires it).
//  - The completion thread takes, in order, what must happen on the host once the device has
//    reached a value of the segment semaphore: read a segment's timestamps and recycle it,
//    signal an event (events are set from the host, so their values never decrease), run a
//    host callback, report a command buffer's completion. A command buffer that needs none of
//    this (no on_complete, no timestamp, no event signal) gives the completion thread nothing:
//    its segments are recycled by a later walk once the device is past them.
//
// Every segment starts with a full memory barrier, which orders it after everything submitted
// earlier to the same VkQueue. Inside a segment, a barrier separates two commands only when
// the later one touches bytes the earlier ones wrote, or writes bytes they read, so that
// independent fills, copies and random fills of one stream overlap on the device.
//
// A host callback that throws fails its command buffer as on cpu: the later fills, copies and
// random fills of that command buffer are skipped, but signals, waits and timestamps still
// happen, so nobody waiting on them hangs.
#include <algorithm>
#include <deque>
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

// A byte range of a heap that commands of the open segment read or wrote.
struct Span {
  const VkHeap* heap;
  size_t begin, end;
  bool overlaps(const Span& o) const noexcept {
    return heap == o.heap && begin < o.end && o.begin < end;
  }
};

// One VkCommandBuffer with its timestamp queries (timed segments only): query 0 is the
// segment's start, the last one its end, those between are timestamp() commands (outs).
struct Segment {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkQueryPool pool = VK_NULL_HANDLE;
  uint32_t capacity = 0;
  uint32_t used = 0;
  bool timed = false;
  uint64_t value = 0;  // the segment semaphore's value its submission signals
  std::vector<uint64_t*> outs;
  // What the commands since the last barrier wrote and read (kMaxSpans at most: past that, the
  // next command takes a barrier).
  static constexpr size_t kMaxSpans = 16;
  std::vector<Span> written, read;
};

class Queue final : public backend::GpuQueue<Queue, VkHeap, Segment*> {
 public:
  explicit Queue(std::shared_ptr<DeviceShared> d)
      : GpuQueue("mpsrt-vk-submit", "mpsrt-vk-done"), d_(std::move(d)), timeline_(d_) {
    DeviceShared& d0 = *d_;
    const uint32_t qi =
        d0.shared_queue ? 0 : d0.next_queue.fetch_add(1) % static_cast<uint32_t>(d0.queues.size());
    vk_queue_ = d0.queues[qi];
    queue_mu_ = &d0.queue_mutexes[qi];
    auto ti = make<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    auto si = make<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
    si.pNext = &ti;
    check(d0.fn.vkCreateSemaphore(d0.device, &si, nullptr, &segments_sem_), "vkCreateSemaphore");
    auto pi = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = d0.family;
    const VkResult r = d0.fn.vkCreateCommandPool(d0.device, &pi, nullptr, &pool_);
    if (r != VK_SUCCESS) {
      d0.fn.vkDestroySemaphore(d0.device, segments_sem_, nullptr);
      fail("vkCreateCommandPool", r);
    }
  }

  ~Queue() override {
    stop();
    DeviceShared& d = *d_;
    // Segments recycled lazily may still run, and empty submissions may still set the
    // timeline: the device must be past all of them before the command pool (their command
    // buffers), the scratch buffer and the semaphores go.
    try {
      wait_semaphores(d, &segments_sem_, &submitted_, 1, false, -1);
      if (on_error_) timeline_.wait(commits_, -1);
    } catch (const std::exception&) {
      d.fn.vkQueueWaitIdle(vk_queue_);  // a lost device: nothing runs any more
    }
    for (auto& s : segments_) {
      if (s->pool) d.fn.vkDestroyQueryPool(d.device, s->pool, nullptr);
    }
    d.fn.vkDestroyCommandPool(d.device, pool_, nullptr);  // frees the command buffers
    d.fn.vkDestroySemaphore(d.device, segments_sem_, nullptr);
    release(d, scratch_);
  }

  backend::TimelineEvent* timeline(backend::ErrorFn on_error) override {
    on_error_ = std::move(on_error);
    return &timeline_;
  }

 private:
  friend GpuQueue;

  // ---------------------------------------------------------------- walks (one at a time)

  template <class F>
  void scope(F&& f) {
    f();
  }
  uint64_t now_ns() const { return d_->device_now_ns(); }
  uint64_t order() const { return submitted_; }

  // Nothing in cb can block the walk: no host callback, no wait for an event not yet reached.
  // Cost: one pass over the commands (a semaphore read per wait).
  bool walks_inline(const CommandBuffer& cb) const {
    for (const Cmd& c : cb.cmds) {
      if (c.kind == Cmd::kCallback) return false;
      if (c.kind == Cmd::kWait && c.event->value() < c.value) return false;
    }
    return true;
  }

  // The walker of gpu_queue.h's walk: one open segment at a time. A host callback or an event
  // wait ends it; a wait blocks the walk, never the VkQueue (streams share VkQueues).
  struct Walker {
    Queue& q;
    const std::shared_ptr<GpuJob>& job;
    uint32_t queries;    // per segment when timed: its timestamps, its start and its end
    bool timed;          // read the segments' times (on_complete, timestamps)
    uint64_t end_value;  // the completion timeline's value the last submission sets (0: none)
    Segment* seg = nullptr;
    bool last_ = false;

    bool is_open() const { return seg != nullptr; }
    void open() {
      if (seg == nullptr) seg = q.begin_segment(timed ? queries : 0);
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
    void last() { last_ = true; }
    void end() {
      if (seg == nullptr) return;
      const uint64_t tl = last_ ? end_value : 0;
      if (tl != 0) q.report_failure(*job);  // before the device may set the timeline
      q.end_segment(std::exchange(seg, nullptr), job, tl);
      if (tl != 0) end_value = 0;  // set
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
    const uint64_t n = ++commits_;
    // The device sets the completion timeline unless the core needs on_complete to run first,
    // or an earlier command buffer's value is still to be set from the host.
    host_path_ =
        on_error_ && (job->on_complete || host_done_.load(std::memory_order_acquire) < host_until_);
    const uint64_t end_value = on_error_ && !host_path_ ? n : 0;
    Walker w{*this, job, timestamps + 2, timestamps > 0 || bool(job->on_complete), end_value};
    walker_ = &w;
    walk(cb, job, w);
    walker_ = nullptr;
  }

  // The end of a walk (gpu_queue.h's hook).
  void finish_job(const std::shared_ptr<GpuJob>& job, std::string submit_error, Signals& after) {
    if (!on_error_) {  // no timeline: the completion thread reports, as gpu_queue.h does
      GpuQueue::finish_job(job, std::move(submit_error), after);
      return;
    }
    const uint64_t n = commits_;
    if (!submit_error.empty() && job->error.empty()) job->error = std::move(submit_error);
    if (!host_path_) {
      // The device sets the timeline: the last segment carried n, unless there was none at
      // the end (or its submission failed); then an empty submission does.
      report_failure(*job);
      if (walker_->end_value != 0) signal_timeline(n);
    } else {
      // The completion thread runs on_complete (which records a failure), then sets the
      // timeline from the host; without on_complete, the failure goes to on_error now.
      if (!job->on_complete) report_failure(*job);
      host_until_ = n;
      Item done;
      done.kind = Item::kComplete;
      done.job = job;
      done.stream_value = n;
      push(std::move(done));
    }
    // The signals that end the command buffer: once the timeline has reached it.
    for (auto& sig : after) {
      Item it;
      it.kind = Item::kSignal;
      it.event = sig.first;
      it.event_value = sig.second;
      it.stream_value = n;
      push(std::move(it));
    }
    after.clear();
  }

  // A failure of the command buffer (a host callback that threw, a submission error) goes to
  // the stream before the timeline may show it complete. Reported once.
  void report_failure(GpuJob& job) {
    if (job.error.empty() || job.reported) return;
    job.reported = true;
    if (on_error_) on_error_(job.error);
  }

  // An empty submission that sets the completion timeline to v after everything submitted
  // before it. If the driver refuses, the host sets it once the earlier values are reached.
  void signal_timeline(uint64_t v) {
    const VkSemaphore sem = timeline_.handle();
    auto ti = make<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = &v;
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.pNext = &ti;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &sem;
    VkResult r;
    {
      std::lock_guard<std::mutex> lock(*queue_mu_);
      r = d_->fn.vkQueueSubmit(vk_queue_, 1, &si, VK_NULL_HANDLE);
    }
    if (r == VK_SUCCESS) return;
    try {
      timeline_.wait(v - 1, -1);
      timeline_.signal(v);
    } catch (const std::exception&) {
      // The device is lost: waiters get the driver's error from their own waits.
    }
  }

  Segment* begin_segment(uint32_t queries) {
    DeviceShared& d = *d_;
    Segment* s = take_free();
    if (s == nullptr) {
      segments_.push_back(std::make_unique<Segment>());
      s = segments_.back().get();
      auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
      ai.commandPool = pool_;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      check(d.fn.vkAllocateCommandBuffers(d.device, &ai, &s->cb), "vkAllocateCommandBuffers");
    }
    s->timed = queries > 0;
    if (s->timed && s->capacity < queries) {
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
    s->written.clear();
    s->read.clear();
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(d.fn.vkBeginCommandBuffer(s->cb, &bi), "vkBeginCommandBuffer");
    if (s->timed) d.fn.vkCmdResetQueryPool(s->cb, s->pool, 0, s->capacity);
    if (!d.shared_queue) {
      // Orders this segment after everything submitted to the VkQueue before it (a shared
      // queue orders it after this stream's segments only: a semaphore wait at submission).
      auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
      mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
      d.fn.vkCmdPipelineBarrier(s->cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                                VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, nullptr, 0,
                                nullptr);
    }
    if (s->timed) {
      d.fn.vkCmdWriteTimestamp(s->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->pool, s->used++);
    }
    return s;
  }

  // Submits the segment; `timeline_value` (when not 0) is set on the completion timeline by
  // the same submission.
  void end_segment(Segment* s, const std::shared_ptr<GpuJob>& job, uint64_t timeline_value) {
    DeviceShared& d = *d_;
    // Makes the device's writes visible to the host once the semaphore is reached.
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT;
    d.fn.vkCmdPipelineBarrier(s->cb,
                              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                              VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    if (s->timed) {
      d.fn.vkCmdWriteTimestamp(s->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->pool, s->used++);
    }
    check(d.fn.vkEndCommandBuffer(s->cb), "vkEndCommandBuffer");
    const uint64_t value = submitted_ + 1;
    const VkSemaphore sems[2] = {segments_sem_, timeline_.handle()};
    const uint64_t values[2] = {value, timeline_value};
    const uint32_t count = timeline_value != 0 ? 2 : 1;
    auto ti = make<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    ti.signalSemaphoreValueCount = count;
    ti.pSignalSemaphoreValues = values;
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    // A shared queue: after this stream's previous segment (already submitted: no deadlock).
    const VkPipelineStageFlags wait_stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    const uint64_t previous = submitted_;
    if (d.shared_queue && previous > 0) {
      ti.waitSemaphoreValueCount = 1;
      ti.pWaitSemaphoreValues = &previous;
      si.waitSemaphoreCount = 1;
      si.pWaitSemaphores = &segments_sem_;
      si.pWaitDstStageMask = &wait_stage;
    }
    si.pNext = &ti;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &s->cb;
    si.signalSemaphoreCount = count;
    si.pSignalSemaphores = sems;
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
    s->value = value;
    if (s->timed) {
      Item it;
      it.kind = Item::kSegment;  // value: submitted_
      it.seg = s;
      it.job = job;
      push(std::move(it));
    } else {
      in_flight_.push_back(s);  // recycled by a later walk (take_free)
    }
  }

  // A recycled segment: one the completion thread finished, or one the device is past.
  Segment* take_free() {
    if (!in_flight_.empty()) {
      uint64_t reached = 0;
      check(d_->fn.vkGetSemaphoreCounterValue(d_->device, segments_sem_, &reached),
            "vkGetSemaphoreCounterValue");
      while (!in_flight_.empty() && in_flight_.front()->value <= reached) {
        recycle(in_flight_.front());
        in_flight_.pop_front();
      }
    }
    std::lock_guard<std::mutex> lock(free_mu_);
    if (free_.empty()) return nullptr;
    Segment* s = free_.back();
    free_.pop_back();
    return s;
  }

  void ensure_scratch() {
    if (scratch_.buffer != VK_NULL_HANDLE) return;
    if (!allocate(*d_, kScratchBytes, &scratch_)) {
      detail::throw_oom("[vulkan] could not allocate the queue's 8 MiB scratch buffer");
    }
  }

  // Whether command c depends on what the segment's earlier commands since the last barrier
  // wrote (or overwrites what they read). Records c's spans.
  static bool hazard(Segment& s, const Cmd& c) {
    Span w{c.dst, c.dst_off, c.dst_off + c.n};
    if (c.kind == Cmd::kRandom) {
      w.end = c.dst_off + c.random->count * dtype_size(c.random->dtype);
    }
    if (c.kind == Cmd::kDispatch) return dispatch_hazard(s, *c.launch);
    const bool copy = c.kind == Cmd::kCopy;
    const Span r{c.src, c.src_off, c.src_off + c.n};
    bool dep = s.written.size() + s.read.size() >= Segment::kMaxSpans;
    for (const Span& x : s.written) dep = dep || x.overlaps(w) || (copy && x.overlaps(r));
    for (const Span& x : s.read) dep = dep || x.overlaps(w);
    if (dep) {
      s.written.clear();
      s.read.clear();
    }
    s.written.push_back(w);
    if (copy) s.read.push_back(r);
    return dep;
  }

  // hazard() for a tensor kernel: its written arguments are written spans, the others read.
  static bool dispatch_hazard(Segment& s, const backend::KernelLaunch& k) {
    bool dep = s.written.size() + s.read.size() + k.nargs > Segment::kMaxSpans;
    for (uint32_t i = 0; i < k.nargs; ++i) {
      const Span a{static_cast<const VkHeap*>(k.args[i].ref.heap), k.args[i].ref.offset,
                   k.args[i].ref.offset + k.args[i].nbytes};
      for (const Span& x : s.written) dep = dep || x.overlaps(a);
      if (k.args[i].written) {
        for (const Span& x : s.read) dep = dep || x.overlaps(a);
      }
    }
    if (dep) {
      s.written.clear();
      s.read.clear();
    }
    for (uint32_t i = 0; i < k.nargs; ++i) {
      const Span a{static_cast<const VkHeap*>(k.args[i].ref.heap), k.args[i].ref.offset,
                   k.args[i].ref.offset + k.args[i].nbytes};
      (k.args[i].written ? s.written : s.read).push_back(a);
    }
    return dep;
  }

  void record(Segment& s, const Cmd& c) {
    const bool needs_scratch =
        (c.kind == Cmd::kCopy && c.src == c.dst && c.src_off != c.dst_off &&
         c.src_off < c.dst_off + c.n && c.dst_off < c.src_off + c.n) ||
        (c.kind == Cmd::kRandom && c.dst_off % dtype_size(c.random->dtype) != 0);
    if (needs_scratch) ensure_scratch();
    Recorder r{*d_, s.cb, scratch_};
    // A command that uses the scratch buffer waits for every earlier one (they may too).
    if (hazard(s, c) || needs_scratch) r.barrier();
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
      case Cmd::kDispatch:
        r.dispatch(*c.launch);
        break;
      default:
        break;
    }
    if (needs_scratch) {  // and every later one waits for it
      s.written.assign(Segment::kMaxSpans, Span{nullptr, 0, 0});
      s.read.clear();
    }
  }

  void recycle(Segment* s) {
    std::lock_guard<std::mutex> lock(free_mu_);
    free_.push_back(s);
  }

  // ---------------------------------------------------------------- completion thread

  // Waits until the segment semaphore reaches v: polls for a short while, then blocks.
  void reach(uint64_t v) {
    if (reached_ >= v) return;
    wait_semaphores(*d_, &segments_sem_, &v, 1, false, -1);
    reached_ = v;
  }

  void before(const Item& it) {
    reach(it.value);
    if (it.kind == Item::kSignal && it.stream_value != 0) {
      // A signal that ends a command buffer: once the completion timeline shows it done.
      timeline_.wait(it.stream_value, -1);
    }
  }

  // kComplete on the host path: report, then set the completion timeline (after every earlier
  // value, some of which the device sets).
  void after_report(const Item& it) {
    if (it.stream_value == 0) return;
    timeline_.wait(it.stream_value - 1, -1);
    timeline_.signal(it.stream_value);
    host_done_.store(it.stream_value, std::memory_order_release);
  }

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
  VkSemaphore segments_sem_ = VK_NULL_HANDLE;  // reaches each segment's value
  Semaphore timeline_;                         // the completion timeline: command buffers done
  backend::ErrorFn on_error_;                  // set by timeline(): the timeline is in use

  // Walker only (one walk at a time, see gpu_queue.h).
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<Segment>> segments_;
  std::deque<Segment*> in_flight_;  // untimed segments submitted, in order
  Allocation scratch_;
  uint64_t submitted_ = 0;    // the segment semaphore's last value submitted
  uint64_t commits_ = 0;      // command buffers walked
  bool host_path_ = false;    // the walk's timeline value is set by the completion thread
  Walker* walker_ = nullptr;  // the walk under way
  uint64_t host_until_ = 0;   // the last timeline value left to the completion thread

  // Completion thread only.
  uint64_t reached_ = 0;
  std::atomic<uint64_t> host_done_{0};  // the last timeline value it set

  std::mutex free_mu_;
  std::vector<Segment*> free_;
};

}  // namespace

std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d) {
  return std::make_unique<Queue>(std::move(d));
}

}  // namespace mpsrt::vk
