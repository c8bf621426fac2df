// The queue skeleton the GPU backends (vulkan, metal) share: command buffers are recordings
// (recording.h) that the queue turns into device work when they are committed, on two threads
// per queue:
//
//  - the submit thread takes committed command buffers in commit order and hands each to the
//    backend's process(), which walks its commands and encodes them into device command buffers
//    ("segments"). A host callback is handed to the completion thread, and the submit thread
//    waits until it has run (later commands must not start before it, and they are skipped if
//    it throws).
//  - the completion thread takes, in order, what must happen once the device has done the work
//    pushed before it: finish a segment (read its times, recycle it), signal an event from the
//    host (so an event's value never decreases), run a host callback, stamp a timestamp with
//    the device clock, report a command buffer's completion.
//
// A command buffer that cannot block -- no host callback, no wait for an event not reached yet
// -- may instead be walked on the committing thread, when the backend allows it and nothing
// committed earlier is still waiting for the submit thread: no hand-off, no wake-up (the
// backend's walks_inline()). Walks never overlap: the submit thread and inline walkers take
// turns, in commit order. The threads start when first needed.
//
// The backend Q derives from GpuQueue<Q, HeapT, Seg> (Seg: its handle of a segment, carried by
// the completion items) and provides, as members GpuQueue may call (a friend):
//   void process(CommandBuffer& cb, const std::shared_ptr<GpuJob>& job)
//       submit thread: the commands of cb, through walk(cb, job, walker)
//   template <class F> void scope(F&& f)    runs f (the submit thread's and the completion
//                                           thread's units of work; metal: an autorelease pool)
//   void before(const Item& it)             completion thread, before each item: wait until
//                                           the device has done the work pushed before it
//                                           (may throw: the item's job fails; at kStop the
//                                           error has no job and is dropped)
//   void finish_segment(Seg& seg, GpuJob& job)
//   uint64_t now_ns()                       the device clock on the host
//   uint64_t order()                        walker: the value items pushed now carry
//                                           (vulkan: the queue semaphore's last submitted value)
// and may shadow GpuQueue's defaults of:
//   bool walks_inline(const CommandBuffer& cb)   false: every command buffer goes to the
//                                                submit thread
//   void finish_job(job, submit_error, after)    the end of a walk: the completion report,
//                                                then the signals that end the command buffer
//   void after_report(const Item& it)            completion thread, after a kComplete item's
//                                                report
// Its destructor calls stop() first, before anything the threads use is destroyed.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/recording.h"
#include "mpsrt/api.h"

namespace mpsrt::backend {

/// What the completion thread reports for one committed command buffer.
struct GpuJob {
  CompletionFn on_complete;
  std::string error;      // the first failure: a callback, a device error, the submit thread
  bool failed = false;    // a host callback threw: later data commands are skipped
  bool reported = false;  // the error went to the queue's error handler already
  bool have_times = false;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t host_start_ns = 0;
};

/// One unit of the completion thread's work.
template <class Seg>
struct GpuItem {
  enum Kind : uint8_t { kSegment, kSignal, kCallback, kTimestamp, kComplete, kStop };
  Kind kind = kStop;
  uint64_t value = 0;  // the backend's order() when pushed
  Seg seg{};
  TimelineEvent* event = nullptr;
  uint64_t event_value = 0;
  uint64_t* out = nullptr;
  std::function<void()> fn;
  std::shared_ptr<GpuJob> job;
  std::string error;          // kComplete: a failure of the submit thread
  uint64_t stream_value = 0;  // backend-specific (vulkan: a completion timeline value)
};

/// Names the calling thread (shown by debuggers and profilers).
inline void name_this_thread(const char* name) {
#if defined(__APPLE__)
  pthread_setname_np(name);
#else
  pthread_setname_np(pthread_self(), name);
#endif
}

template <class Q, class HeapT, class Seg>
class GpuQueue : public Queue {
 public:
  using CommandBuffer = RecordingCommandBuffer<HeapT>;
  using Cmd = RecordedCmd<InHeap<HeapT>>;
  using Item = GpuItem<Seg>;
  using Signals = std::vector<std::pair<TimelineEvent*, uint64_t>>;

  GpuQueue(const char* submit_name, const char* done_name)
      : submit_name_(submit_name), done_name_(done_name) {}
  ~GpuQueue() override { stop(); }

  // Cost: a recycled command buffer (its storage sized by earlier recordings: no allocation
  // while recording) under an uncontended lock; a new one while none is recycled.
  std::unique_ptr<backend::CommandBuffer> create_command_buffer() override {
    {
      std::lock_guard<std::mutex> lock(recycled_mu_);
      if (!recycled_.empty()) {
        std::unique_ptr<CommandBuffer> cb = std::move(recycled_.back());
        recycled_.pop_back();
        return cb;
      }
    }
    return std::make_unique<CommandBuffer>();
  }

  // Cost, inline: the walk itself on this thread (two uncontended lock round trips around it).
  // Otherwise: a lock, a deque push and a condition-variable notify.
  void commit(std::unique_ptr<backend::CommandBuffer> cb, CompletionFn on_complete) override {
    std::unique_ptr<CommandBuffer> c(static_cast<CommandBuffer*>(cb.release()));
    std::unique_lock<std::mutex> lock(mu_);
    if (pending_.empty() && !walking_ && q().walks_inline(*c)) {
      walking_ = true;
      lock.unlock();
      struct Done {  // hands the turn back, also when the walk throws
        GpuQueue& self;
        ~Done() {
          bool more;
          {
            std::lock_guard<std::mutex> l(self.mu_);
            self.walking_ = false;
            more = !self.pending_.empty();
          }
          if (more) self.cv_.notify_all();
        }
      } done{*this};
      run(*c, std::move(on_complete));
      recycle(std::move(c));
      return;
    }
    if (!submitter_.joinable()) submitter_ = std::thread([this] { submit_loop(); });
    pending_.emplace_back(std::move(c), std::move(on_complete));
    lock.unlock();
    cv_.notify_all();
  }

 protected:
  /// Runs what was committed, then stops both threads. Idempotent.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (submitter_.joinable()) submitter_.join();  // drains what is pending
    bool completing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      completing = completer_.joinable();
    }
    if (completing) {
      Item it;
      it.kind = Item::kStop;
      push(std::move(it));
      completer_.join();
    }
  }

  /// Hands an item to the completion thread (starting it on first use).
  void push(Item it) {
    it.value = q().order();
    if (MPSRT_UNLIKELY(!completing_.load(std::memory_order_acquire))) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!completer_.joinable()) completer_ = std::thread([this] { complete_loop(); });
      completing_.store(true, std::memory_order_release);
    }
    {
      std::lock_guard<std::mutex> lock(items_mu_);
      items_.push_back(std::move(it));
    }
    items_cv_.notify_one();
  }

  // The defaults of the hooks a backend may shadow (see the top of this file).
  bool walks_inline(const CommandBuffer&) const { return false; }
  void after_report(const Item&) {}
  void finish_job(const std::shared_ptr<GpuJob>& job, std::string submit_error, Signals& after) {
    Item done;
    done.kind = Item::kComplete;
    done.error = std::move(submit_error);
    done.job = job;
    push(std::move(done));
    push_signals(after);
  }

  /// The completion thread sets the event once the work pushed before it is done.
  void push_signals(Signals& signals) {
    for (auto& s : signals) {
      Item it;
      it.kind = Item::kSignal;
      it.event = s.first;
      it.event_value = s.second;
      push(std::move(it));
    }
    signals.clear();
  }

  /// Runs fn on the completion thread after the work pushed before it, and waits for it.
  /// Returns whether the command buffer failed (fn threw, now or earlier).
  bool call_back(std::function<void()>& fn, const std::shared_ptr<GpuJob>& job) {
    Item it;
    it.kind = Item::kCallback;
    it.fn = std::move(fn);
    it.job = job;
    const uint64_t ticket = ++callbacks_sent_;
    push(std::move(it));
    std::unique_lock<std::mutex> lock(cb_mu_);
    cb_cv_.wait(lock, [&] { return callbacks_done_ >= ticket; });
    return job->failed;
  }

  /// The walk over a command buffer's commands, for process(). W, the backend's walker over
  /// its open segment, provides:
  ///   bool is_open()                 a segment is open
  ///   void last()                    the next close ends the command buffer
  ///   void data(Cmd& c)              encodes a fill, copy or random fill (opening a segment)
  ///   void timestamp(Cmd& c, close)  close() ends the open segment and pushes the signals
  ///   void wait(Cmd& c, close)       recorded so far
  ///   void end()                     ends and submits the open segment, if any
  ///   void settle()                  before a host callback and at the end: what must not
  ///                                  wait for a later segment
  ///   void abandon()                 after a failure: drops or ends the open segment
  /// Data commands after a host callback that threw are skipped; signals, waits and timestamps
  /// still happen, and so does the completion report, so that nobody waiting on them hangs. A
  /// failure while encoding or submitting (an exception) is reported on the command buffer.
  template <class W>
  void walk(CommandBuffer& cb, const std::shared_ptr<GpuJob>& job, W& w) {
    Signals signals;  // set once the open segment is done
    auto close = [&] {
      w.end();
      push_signals(signals);
    };
    // The signals that end the command buffer are set after its completion is reported.
    const size_t trailing = trailing_signals(cb.cmds);
    Signals after_completion;
    bool failed = false;
    std::string submit_error;
    try {
      for (size_t i = 0; i < cb.cmds.size(); ++i) {
        Cmd& c = cb.cmds[i];
        switch (c.kind) {
          case Cmd::kFill:
          case Cmd::kCopy:
          case Cmd::kRandom:
          case Cmd::kDispatch:
            if (!failed) w.data(c);
            break;
          case Cmd::kTimestamp:
            w.timestamp(c, close);
            break;
          case Cmd::kSignal:
            if (i >= trailing) {
              after_completion.emplace_back(c.event, c.value);
              break;
            }
            signals.emplace_back(c.event, c.value);
            if (!w.is_open()) close();
            break;
          case Cmd::kWait:
            w.wait(c, close);
            break;
          case Cmd::kCallback:
            if (failed) break;
            close();
            w.settle();
            failed = call_back(c.fn, job);
            break;
        }
      }
      w.last();  // the close below ends the command buffer
      close();
      w.settle();
    } catch (const std::exception& e) {
      w.abandon();
      submit_error = e.what();
      close();
      w.settle();
    }
    cb.reset();  // drops what the commands hold before completion is reported
    q().finish_job(job, std::move(submit_error), after_completion);
  }

 private:
  Q& q() { return static_cast<Q&>(*this); }

  // A walked command buffer (empty, its storage kept) for create_command_buffer() to hand out
  // again; beyond kRecycled of them it is freed.
  void recycle(std::unique_ptr<CommandBuffer> cb) {
    cb->reset();
    std::lock_guard<std::mutex> lock(recycled_mu_);
    if (recycled_.size() < kRecycled) recycled_.push_back(std::move(cb));
  }

  // One command buffer's walk (the submit thread's or an inline committer's turn).
  void run(CommandBuffer& cb, CompletionFn on_complete) {
    q().scope([&] {
      auto job = std::make_shared<GpuJob>();
      job->on_complete = std::move(on_complete);
      job->host_start_ns = q().now_ns();
      q().process(cb, job);
    });
  }

  void submit_loop() {
    name_this_thread(submit_name_);
    for (;;) {
      std::pair<std::unique_ptr<CommandBuffer>, CompletionFn> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !walking_ && (stop_ || !pending_.empty()); });
        if (pending_.empty()) break;  // stop_ and drained
        next = std::move(pending_.front());
        pending_.pop_front();
        walking_ = true;
      }
      run(*next.first, std::move(next.second));
      recycle(std::move(next.first));
      {
        std::lock_guard<std::mutex> lock(mu_);
        walking_ = false;
      }
    }
  }

  void complete_loop() {
    name_this_thread(done_name_);
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lock(items_mu_);
        items_cv_.wait(lock, [&] { return !items_.empty(); });
        it = std::move(items_.front());
        items_.pop_front();
      }
      if (it.kind == Item::kStop) {
        try {
          q().before(it);
        } catch (const std::exception&) {
          // Nothing waits on a stop: the device's failure was reported to the jobs before it.
        }
        return;
      }
      q().scope([&] { complete(it); });
    }
  }

  void complete(Item& it) {
    try {
      q().before(it);
    } catch (const std::exception& e) {
      if (it.job && it.job->error.empty()) it.job->error = e.what();
    }
    switch (it.kind) {
      case Item::kSegment:
        q().finish_segment(it.seg, *it.job);
        break;
      case Item::kSignal:
        it.event->signal(it.event_value);
        break;
      case Item::kCallback:
        run_callback(it.fn, *it.job);
        break;
      case Item::kTimestamp:
        *it.out = q().now_ns();
        break;
      case Item::kComplete:
        if (!it.error.empty() && it.job->error.empty()) it.job->error = it.error;
        report(*it.job);
        q().after_report(it);
        break;
      case Item::kStop:
        break;
    }
  }

  void run_callback(std::function<void()>& fn, GpuJob& job) {
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

  void report(GpuJob& job) {
    Completion c;
    c.error = job.error;
    if (job.have_times) {
      c.device_start_ns = job.start_ns;
      c.device_end_ns = std::max(job.end_ns, job.start_ns);
    } else {
      c.device_start_ns = job.host_start_ns;
      c.device_end_ns = std::max(q().now_ns(), job.host_start_ns);
    }
    CompletionFn fn = std::move(job.on_complete);
    if (fn) fn(c);
  }

  const char* submit_name_;
  const char* done_name_;

  uint64_t callbacks_sent_ = 0;  // submit thread only

  static constexpr size_t kRecycled = 4;
  std::mutex recycled_mu_;
  std::vector<std::unique_ptr<CommandBuffer>> recycled_;

  std::mutex mu_;  // pending_, walking_, stop_, thread start
  std::condition_variable cv_;
  std::deque<std::pair<std::unique_ptr<CommandBuffer>, CompletionFn>> pending_;
  bool walking_ = false;  // a walk is under way (the submit thread's or an inline one)
  bool stop_ = false;
  std::atomic<bool> completing_{false};  // the completion thread has started

  std::mutex items_mu_;
  std::condition_variable items_cv_;
  std::deque<Item> items_;

  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  uint64_t callbacks_done_ = 0;

  std::thread submitter_;
  std::thread completer_;
};

}  // namespace mpsrt::backend
