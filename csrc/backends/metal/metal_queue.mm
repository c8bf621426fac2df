// Queues of the metal backend.
//
// A command buffer is a recording of commands (as on cpu and vulkan); the queue turns it into
// MTLCommandBuffers ("segments") when it is committed. Each queue has two threads:
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
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "backends/metal/metal_common.h"
#include "backends/recording.h"
#include "mpsrt/error.h"

namespace mpsrt::metal {
namespace {

using backend::BufferRef;
using backend::Completion;
using backend::CompletionFn;

constexpr uint64_t kScratchBytes = uint64_t(8) << 20;

void name_thread(const char* name) {
#if defined(__APPLE__)
  pthread_setname_np(name);
#else
  pthread_setname_np(pthread_self(), name);  // the Linux compile check of this file
#endif
}

using Cmd = backend::RecordedCmd<MetalHeap>;
using CommandBuffer = backend::RecordingCommandBuffer<MetalHeap>;

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

// What the completion thread reports for one committed command buffer.
struct Job {
  CompletionFn on_complete;
  std::string error;
  bool failed = false;
  bool have_times = false;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t host_start_ns = 0;
};

struct Item {
  enum Kind : uint8_t { kSegment, kSignal, kCallback, kTimestamp, kComplete, kStop };
  Kind kind = kStop;
  std::shared_ptr<Segment> seg;
  backend::TimelineEvent* event = nullptr;
  uint64_t event_value = 0;
  uint64_t* out = nullptr;
  std::function<void()> fn;
  std::shared_ptr<Job> job;
  std::string error;  // kComplete: a failure of the submit thread
};

class Queue final : public backend::Queue {
 public:
  Queue(std::shared_ptr<DeviceShared> d, int priority) : d_(std::move(d)) {
    (void)priority;  // Metal command queues have no priority
    id<MTLCommandQueue> q = [d_->device newCommandQueue];
    if (q == nil) {
      detail::throw_error(
          "[metal] newCommandQueue returned nil; too many streams are open, use fewer");
    }
    q.label = @"mpsrt stream";
    queue_ = q;
  }

  ~Queue() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (submitter_.joinable()) submitter_.join();  // drains, then stops the completer
    if (completer_.joinable()) completer_.join();
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
    name_thread("mpsrt-mtl-submit");
    for (;;) {
      std::pair<std::unique_ptr<CommandBuffer>, CompletionFn> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) break;  // stop_ and drained
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      @autoreleasepool {
        process(*next.first, std::move(next.second));
      }
    }
    Item stop;
    stop.kind = Item::kStop;
    push(std::move(stop));
  }

  void process(CommandBuffer& cb, CompletionFn on_complete) {
    auto job = std::make_shared<Job>();
    job->on_complete = std::move(on_complete);
    job->host_start_ns = device_now_ns();
    std::shared_ptr<Segment> seg;
    std::vector<uint64_t*> unbound;  // timestamps waiting for the next segment's start
    std::vector<std::pair<backend::TimelineEvent*, uint64_t>> signals;  // at the segment's end
    bool failed = false;
    std::string submit_error;
    auto open = [&] {
      if (seg == nullptr) {
        seg = begin_segment();
        seg->start_outs.swap(unbound);
      }
    };
    auto close = [&] {
      if (seg != nullptr) {
        end_segment(seg, job);
        seg = nullptr;
      }
      for (auto& s : signals) push_signal(s.first, s.second);
      signals.clear();
    };
    // Timestamps with no segment after them take the time the completion thread reaches them.
    auto flush_unbound = [&] {
      for (uint64_t* out : unbound) {
        Item it;
        it.kind = Item::kTimestamp;
        it.out = out;
        push(std::move(it));
      }
      unbound.clear();
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
            encode(*seg, c);
            break;
          case Cmd::kTimestamp:
            if (seg != nullptr) {
              seg->end_outs.push_back(c.out);
              close();
            } else {
              unbound.push_back(c.out);
            }
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
            open();
            [seg->cb encodeWaitForEvent:static_cast<MetalEvent*>(c.event)->event() value:c.value];
            break;
          case Cmd::kCallback: {
            if (failed) break;
            close();
            flush_unbound();
            Item it;
            it.kind = Item::kCallback;
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
      flush_unbound();
    } catch (const std::exception& e) {
      // A failure while encoding: report it on this command buffer and still run its signals
      // and timestamps, so that nobody waiting on them hangs.
      if (seg != nullptr) {
        end_segment(seg, job);
        seg = nullptr;
      }
      submit_error = e.what();
      close();
      flush_unbound();
    }
    cb.cmds.clear();  // drops what the commands hold before completion is reported
    Item done;
    done.kind = Item::kComplete;
    done.error = std::move(submit_error);
    done.job = std::move(job);
    push(std::move(done));
    for (auto& s : after_completion) push_signal(s.first, s.second);
  }

  // The completion thread sets the event once the work pushed before it is done.
  void push_signal(backend::TimelineEvent* event, uint64_t value) {
    Item it;
    it.kind = Item::kSignal;
    it.event = event;
    it.event_value = value;
    push(std::move(it));
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

  void end_segment(const std::shared_ptr<Segment>& seg, const std::shared_ptr<Job>& job) {
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

  void encode(Segment& s, const Cmd& c) {
    if (c.kind == Cmd::kCopy && c.src == c.dst && c.src_off != c.dst_off &&
        c.src_off < c.dst_off + c.n && c.dst_off < c.src_off + c.n) {
      ensure_scratch();
    }
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

  void push(Item it) {
    {
      std::lock_guard<std::mutex> lock(items_mu_);
      items_.push_back(std::move(it));
    }
    items_cv_.notify_one();
  }

  // ---------------------------------------------------------------- completion thread

  void complete_loop() {
    name_thread("mpsrt-mtl-done");
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lock(items_mu_);
        items_cv_.wait(lock, [&] { return !items_.empty(); });
        it = std::move(items_.front());
        items_.pop_front();
      }
      @autoreleasepool {
        switch (it.kind) {
          case Item::kStop:
            return;
          case Item::kSegment:
            finish_segment(*it.seg, *it.job);
            break;
          case Item::kSignal:
            it.event->signal(it.event_value);
            break;
          case Item::kCallback:
            run_callback(it.fn, *it.job);
            break;
          case Item::kTimestamp:
            *it.out = device_now_ns();
            break;
          case Item::kComplete:
            if (!it.error.empty() && it.job->error.empty()) it.job->error = it.error;
            report(*it.job);
            break;
        }
      }
    }
  }

  // Waits for the segment's completed handler; an empty or unscheduled command buffer may
  // report no device times, then the host clock stands in.
  void finish_segment(Segment& s, Job& job) {
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
      c.device_end_ns = std::max(device_now_ns(), job.host_start_ns);
    }
    CompletionFn fn = std::move(job.on_complete);
    if (fn) fn(c);
  }

  std::shared_ptr<DeviceShared> d_;
  id<MTLCommandQueue> queue_ = nil;

  // Submit thread only.
  id<MTLBuffer> scratch_ = nil;
  uint64_t callbacks_sent_ = 0;

  std::mutex mu_;  // pending_, stop_, thread start
  std::condition_variable cv_;
  std::deque<std::pair<std::unique_ptr<CommandBuffer>, CompletionFn>> pending_;
  bool stop_ = false;

  std::mutex items_mu_;
  std::condition_variable items_cv_;
  std::deque<Item> items_;

  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  uint64_t callbacks_done_ = 0;

  std::thread submitter_;
  std::thread completer_;
};

}  // namespace

std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d, int priority) {
  return std::make_unique<Queue>(std::move(d), priority);
}

}  // namespace mpsrt::metal
