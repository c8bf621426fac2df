#include "core/stream.h"

#include "core/allocator/caching_allocator.h"
#include "core/runtime.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

StreamImpl::StreamImpl(DeviceContext& device, int64_t id, int priority)
    : device_(device), id_(id), priority_(priority) {
  queue_ = device_.backend_device().create_queue(priority);
  completed_ = device_.backend_device().create_event();
}

StreamImpl::~StreamImpl() {
  wait_idle();
  queue_.reset();  // joins the queue's worker, if any
}

int StreamImpl::device_index() const noexcept {
  return device_.index();
}

uint64_t StreamImpl::commit_locked() {
  std::unique_ptr<backend::CommandBuffer> cb =
      open_ ? std::move(open_) : queue_->create_command_buffer();
  const uint64_t seq = committed_.load(std::memory_order_relaxed) + 1;
  // Back-pressure: at most kMaxInFlight command buffers queued; the encoder waits (holding
  // the stream's lock, so every encoder on this stream waits) for the oldest to finish.
  if (MPSRT_UNLIKELY(seq > kMaxInFlight)) completed_->wait(seq - kMaxInFlight, -1);
  committed_.store(seq, std::memory_order_release);
  open_pending_.store(false, std::memory_order_release);
  // Cost: the lambda's two words fit std::function's inline storage (no allocation).
  queue_->commit(std::move(cb), [this, seq](const backend::Completion& c) {
    if (MPSRT_UNLIKELY(!c.error.empty())) record_error(c.error);
    completed_->signal(seq);
  });
  return seq;
}

void StreamImpl::apply_locked(SyncType sync, std::unique_lock<std::mutex>& lock) {
  switch (sync) {
    case SyncType::None:
      return;
    case SyncType::Commit:
    case SyncType::CommitAndContinue:
      commit_locked();
      return;
    case SyncType::CommitAdaptive:
      // Commit only when memory is tight: freed buffers then become reusable sooner.
      if (open_ && open_->size() > 0 && device_.allocator().under_pressure()) commit_locked();
      return;
    case SyncType::CommitAndWait: {
      const uint64_t seq = commit_locked();
      lock.unlock();
      wait_for(seq);
      return;
    }
  }
}

void StreamImpl::commit(SyncType sync) {
  std::unique_lock<std::mutex> lock(mu_);
  apply_locked(sync, lock);
}

void StreamImpl::synchronize() {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ && open_->size() > 0) {
      const uint64_t prev = committed_.load(std::memory_order_relaxed);
      if (completed_->value() >= prev) {
        // Everything before it is done and we are about to wait for it: let the backend run
        // it here if it can (cpu: no hand-off, the data stays in this core's cache).
        const uint64_t next = prev + 1;
        backend::CompletionFn done = [this, next](const backend::Completion& c) {
          if (MPSRT_UNLIKELY(!c.error.empty())) record_error(c.error);
          completed_->signal(next);
        };
        // While it runs, fence_value() still reads prev + pending = next: frees stay covered.
        if (queue_->run_inline(open_, done)) {
          committed_.store(next, std::memory_order_release);
          open_pending_.store(false, std::memory_order_release);
        } else {
          commit_locked();
        }
      } else {
        commit_locked();
      }
    }
    seq = committed_;
  }
  wait_for(seq);
}

void StreamImpl::wait_idle() {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ && open_->size() > 0) commit_locked();
    seq = committed_;
  }
  completed_->wait(seq, -1);
}

bool StreamImpl::query() {
  // Lock-free: it must answer even while an encoder holds the lock, waiting on back-pressure.
  if (open_pending_.load(std::memory_order_acquire)) return false;
  return completed_->value() >= committed_.load(std::memory_order_acquire);
}

void StreamImpl::wait_for(uint64_t seq) {
  completed_->wait(seq, -1);
  rethrow_error();
}

void StreamImpl::record_error(const std::string& what) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.empty()) error_ = what;
}

void StreamImpl::rethrow_error() {
  std::string e;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (MPSRT_LIKELY(error_.empty())) return;
    e.swap(error_);
  }
  throw_error("[stream] a command on device " + std::to_string(device_.index()) + " stream " +
              std::to_string(id_) + " failed: " + e + "; the stream stays usable");
}

}  // namespace mpsrt::detail
