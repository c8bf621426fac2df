#include "core/stream.h"

#include <algorithm>
#include <exception>

#include "core/allocator/caching_allocator.h"
#include "core/device.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

// ---------------------------------------------------------------- StreamImpl

StreamImpl::StreamImpl(DeviceContext& device, int64_t id, int priority)
    : AllocStream(id), device_(device), priority_(priority) {
  queue_ = device_.backend_device().create_queue(priority);
  // Where the queue keeps a completion timeline (the device signals it), waits go to the
  // device directly; otherwise each completion signals an event of the stream's own.
  completed_ = queue_->timeline([this](const std::string& what) { record_error(what); });
  if (completed_ == nullptr) {
    own_completed_ = device_.backend_device().create_event();
    completed_ = own_completed_.get();
  }
}

StreamImpl::~StreamImpl() {
  wait_idle();
  queue_.reset();  // joins the queue's worker, if any
}

int StreamImpl::device_index() const noexcept {
  return device_.index();
}

bool StreamImpl::stale() const noexcept {
  return device_.stale();
}

uint64_t StreamImpl::commit_locked(backend::CompletionFn done) {
  std::unique_ptr<backend::CommandBuffer> cb =
      open_ ? std::move(open_) : queue_->create_command_buffer();
  const uint64_t seq = committed_.load(std::memory_order_relaxed) + 1;
  // Back-pressure: at most kMaxInFlight command buffers queued; the encoder waits (holding
  // the stream's lock, so every encoder on this stream waits) for the oldest to finish.
  if (MPSRT_UNLIKELY(seq > kMaxInFlight)) completed_->wait(seq - kMaxInFlight, -1);
  committed_.store(seq, std::memory_order_release);
  open_pending_.store(false, std::memory_order_release);
  Quiet::bump();  // committed, not completed: not idle (an empty command buffer too)
  queue_->commit(std::move(cb), done ? std::move(done) : completion(seq));
  return seq;
}

backend::CompletionFn StreamImpl::completion(uint64_t seq) {
  if (MPSRT_LIKELY(profiled_ == nullptr)) {
    // The queue's timeline: nothing to do on completion (failures come through on_error), so
    // the device may signal it directly.
    if (own_completed_ == nullptr) return nullptr;
    // Cost: the lambda's two words fit std::function's inline storage (no allocation).
    return [this, seq](const backend::Completion& c) {
      if (MPSRT_UNLIKELY(!c.error.empty())) record_error(c.error);
      completed_->signal(seq);
    };
  }
  std::shared_ptr<prof::Batch> batch(profiled_.release());
  batch->commit_ns = prof::now_ns();
  const bool signal = own_completed_ != nullptr;
  return [this, seq, batch, signal](const backend::Completion& c) {
    if (MPSRT_UNLIKELY(!c.error.empty())) record_error(c.error);
    // Recorded before the completion shows: whoever waits for the work finds its records (a
    // queue's timeline reaches seq only after this has run).
    prof::complete(*batch, c);
    if (signal) completed_->signal(seq);
  };
}

void StreamImpl::encode_profiled(const prof::OpDesc& op,
                                 const std::function<void(backend::CommandBuffer&)>& f,
                                 SyncType sync) {
  const int64_t begin = prof::now_ns();
  std::unique_lock<std::mutex> lock(mu_);
  if (!open_) open_ = queue_->create_command_buffer();
  if (!profiled_) {
    profiled_.reset(
        prof::new_batch(device_.index(), id_, device_.backend_device().host_clock_offset_ns()));
  }
  prof::PendingOp& p = prof::add_op(*profiled_, op);
  open_->timestamp(&p.device_begin);
  f(*open_);
  open_->timestamp(&p.device_end);
  mark_pending();
  p.host_begin = begin;
  p.host_end = prof::now_ns();
  prof::record_encode(*profiled_, p);
  if ((profiled_->flags & prof::kWait) != 0) sync = SyncType::CommitAndWait;
  apply_locked(sync, lock);
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
  // Idle -- nothing encoded, every committed command buffer completed, no failure recorded (a
  // completion records its failure before completed_ reaches it): nothing to commit or wait
  // for, and no lock taken (a host operation on device memory asks this before each run).
  if (idle()) return;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ && open_->size() > 0) {
      const uint64_t prev = committed_.load(std::memory_order_relaxed);
      if (completed_->value() >= prev) {
        // Everything before it is done and we are about to wait for it: let the backend run
        // it here if it can (cpu: no hand-off, the data stays in this core's cache).
        const uint64_t next = prev + 1;
        backend::CompletionFn done = completion(next);
        // While it runs, fence_value() still reads prev + pending = next: frees stay covered.
        if (queue_->run_inline(open_, done)) {
          committed_.store(next, std::memory_order_release);
          open_pending_.store(false, std::memory_order_release);
        } else {
          commit_locked(std::move(done));
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
  if (open_pending_.load(std::memory_order_acquire)) {
    // Work is encoded but not committed: commit it, so that a caller polling query() sees it
    // complete. Never blocks: while an encoder holds the lock (it may be waiting on
    // back-pressure), the answer is simply "not yet".
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock() && open_ && open_->size() > 0) commit_locked();
    return false;
  }
  return completed_->value() >= committed_.load(std::memory_order_acquire);
}

void StreamImpl::wait_for(uint64_t seq) {
  completed_->wait(seq, -1);
  rethrow_error();
}

void StreamImpl::record_error(const std::string& what) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.empty()) error_ = what;
  failed_.store(true, std::memory_order_release);
  Quiet::bump();
}

void StreamImpl::rethrow_error() {
  std::string e;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (MPSRT_LIKELY(error_.empty())) return;
    e.swap(error_);
    failed_.store(false, std::memory_order_release);
  }
  throw_error("[stream] a command on device " + std::to_string(device_.index()) + " stream " +
              std::to_string(id_) + " failed: " + e + "; the stream stays usable");
}

// ---------------------------------------------------------------- DeviceStreams

namespace {
// The calling thread's current stream per device index. An entry counts only for the
// DeviceStreams whose generation it carries: after a runtime reset every thread starts again
// from the default streams.
constexpr size_t kMaxDevices = 64;
struct CurrentStream {
  uint64_t generation = 0;  // 0: never set
  StreamImpl* stream = nullptr;
};
thread_local std::array<CurrentStream, kMaxDevices> tls_current;
std::atomic<uint64_t> g_next_generation{1};
}  // namespace

DeviceStreams::DeviceStreams(DeviceContext& device)
    : device_(device),
      index_(device.index()),
      generation_(g_next_generation.fetch_add(1, std::memory_order_relaxed)),
      default_(std::make_unique<StreamImpl>(device, 0, 0)) {
  all_.push_back(default_.get());
}

DeviceStreams::~DeviceStreams() {
  for (auto& cls : pool_) {
    for (auto& s : cls) s.reset();
  }
  default_.reset();
}

StreamImpl& DeviceStreams::current() noexcept {
  const CurrentStream& c = tls_current[static_cast<size_t>(index_)];
  return MPSRT_LIKELY(c.generation == generation_) ? *c.stream : *default_;
}

StreamImpl& DeviceStreams::set_current(StreamImpl& s) noexcept {
  CurrentStream& c = tls_current[static_cast<size_t>(index_)];
  StreamImpl* prev = c.generation == generation_ ? c.stream : default_.get();
  c = {generation_, &s};
  return *prev;
}

StreamImpl& DeviceStreams::pool_stream(int priority) {
  const int cls = priority < 0 ? 0 : (priority == 0 ? 1 : 2);
  const uint32_t k = pool_next_[static_cast<size_t>(cls)].fetch_add(1, std::memory_order_relaxed) %
                     kPoolStreamsPerPriority;
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = pool_[static_cast<size_t>(cls)][k];
  if (!slot) {
    slot = std::make_unique<StreamImpl>(device_, next_id_++, cls == 0 ? -1 : (cls == 1 ? 0 : 1));
    all_.push_back(slot.get());
  }
  return *slot;
}

std::vector<StreamImpl*> DeviceStreams::all() {
  std::lock_guard<std::mutex> lock(mu_);
  return all_;
}

void DeviceStreams::synchronize() {
  // Commit every stream's open work but one, so their work runs side by side; then wait for
  // the one left open first: its synchronize() may run that work on this thread (no hand-off,
  // the data stays in this core's cache) while the others run on their queues. Every stream is
  // waited for even when one failed; the first failure is raised after.
  std::vector<StreamImpl*> streams = all();
  StreamImpl* inline_one = nullptr;
  for (StreamImpl* s : streams) {
    if (!s->has_open_work()) continue;
    if (inline_one != nullptr) inline_one->flush();
    inline_one = s;
  }
  if (inline_one != nullptr) {
    std::iter_swap(streams.begin(), std::find(streams.begin(), streams.end(), inline_one));
  }
  std::exception_ptr first;
  for (StreamImpl* s : streams) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void DeviceStreams::wait_idle() {
  for (StreamImpl* s : all()) s->wait_idle();
}

void DeviceStreams::flush() {
  for (StreamImpl* s : all()) s->flush();
}

}  // namespace mpsrt::detail
