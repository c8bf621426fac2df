#include "core/event.h"

#include <string>

#include "core/stream.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {

// The sentences torch.cuda raises are kept, so that a search for them finds these.
void throw_elapsed_needs_timing() {
  throw_invalid(
      "[event] elapsed_time: Both events must be created with argument 'enable_timing=True'; "
      "make them with Event(enable_timing=True)");
}

void throw_elapsed_needs_records() {
  throw_invalid(
      "[event] elapsed_time: Both events must be recorded before calculating elapsed time; "
      "record each on a stream first");
}

// ---------------------------------------------------------------- EventPool

PooledEvent* EventPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  // Only an event whose last record has completed may be reused: a stream still waiting on
  // an older value must not be released by the new owner's records.
  for (size_t i = free_.size(); i-- > 0;) {
    PooledEvent* e = free_[i];
    if (e->event->value() >= e->last_value) {
      free_[i] = free_.back();
      free_.pop_back();
      return e;
    }
  }
  auto e = std::make_unique<PooledEvent>();
  e->event = device_.create_event();
  all_.push_back(std::move(e));
  return all_.back().get();
}

void EventPool::release(PooledEvent* e) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(e);
}

size_t EventPool::in_use() {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size() - free_.size();
}

// ---------------------------------------------------------------- EventImpl

EventImpl::EventImpl(DeviceContext& device, bool timing)
    : device_(device), ev_(device.events().acquire()), timing_(timing) {}

EventImpl::~EventImpl() {
  // In a forked child the pool is the parent's (its lock may be held by a thread that does
  // not exist here): the event is left behind.
  if (MPSRT_LIKELY(!stale())) device_.events().release(ev_);
}

void EventImpl::record(StreamImpl& stream) {
  if (stream.device_index() != device_.index()) {
    throw_invalid("[event] record: the event belongs to device " + std::to_string(device_.index()) +
                  " but the stream to device " + std::to_string(stream.device_index()) +
                  "; record it on a stream of its device");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t value = ++ev_->last_value;
  backend::TimelineEvent& e = *ev_->event;
  // On an idle stream the event is reached the moment it is recorded: signal it from the host
  // instead of encoding a command buffer that a query would then have to commit (record +
  // query: tens of ns instead of a submission each). Not for timing events, whose timestamp
  // comes from the device's clock, nor in a profiling session, whose trace shows each record.
  if (!timing_ && prof::flags() == 0 && stream.if_idle([&] { e.signal(value); })) {
    stream_.store(&stream, std::memory_order_relaxed);
    fence_.store(stream.fence_value(), std::memory_order_relaxed);
    target_.store(value, std::memory_order_release);
    return;
  }
  uint64_t* ts = timing_ ? &ev_->timestamp_ns : nullptr;
  stream.encode({prof::Op::EventRecord}, [&](backend::CommandBuffer& cb) {
    if (ts != nullptr) cb.timestamp(ts);
    cb.signal(e, value);
  });
  // Not committed here (recording stays ~50 ns): whoever needs the event to complete -- a
  // query, a host wait or a wait on another stream -- commits the recording stream then.
  stream_.store(&stream, std::memory_order_relaxed);
  fence_.store(stream.fence_value(), std::memory_order_relaxed);
  target_.store(value, std::memory_order_release);
}

void EventImpl::wait(StreamImpl& stream) {
  const uint64_t target = target_.load(std::memory_order_acquire);
  if (target == 0) return;  // never recorded: nothing to wait for (torch semantics)
  flush();
  backend::TimelineEvent& e = *ev_->event;
  stream.encode({prof::Op::EventWait}, [&](backend::CommandBuffer& cb) { cb.wait(e, target); });
}

void EventImpl::flush() const {
  StreamImpl* s = stream_.load(std::memory_order_relaxed);
  if (s != nullptr && !s->committed_up_to(fence_.load(std::memory_order_relaxed))) {
    s->commit(SyncType::Commit);
  }
}

// A record that ends its command buffer is signalled only after the command buffer's completion
// is reported (backend::trailing_signals), so once the event is reached the stream's query(),
// synchronize() and the allocator's reuse agree; and once the command buffer has completed, the
// event counts as reached even before its signal lands.
bool EventImpl::query() const {
  const uint64_t target = target_.load(std::memory_order_acquire);
  if (ev_->event->value() >= target) return true;
  if (stream_.load(std::memory_order_relaxed)->reached(fence_.load(std::memory_order_relaxed))) {
    return true;
  }
  flush();
  return false;
}

void EventImpl::synchronize() const {
  const uint64_t target = target_.load(std::memory_order_acquire);
  if (target == 0) return;
  flush();
  StreamImpl* s = stream_.load(std::memory_order_relaxed);
  if (timing_ || s == nullptr) {
    // A timing event's timestamp is read before its signal is set: wait for the signal.
    ev_->event->wait(target, -1);
    return;
  }
  // The record's command buffer completing is as good as the signal (see query()), and the
  // stream's timeline may be set by the device itself: wait for whichever comes first.
  ev_->event->wait_either(target, s->completion_timeline(), fence_.load(std::memory_order_relaxed),
                          -1);
}

double EventImpl::elapsed_ms(const EventImpl& end) const {
  if (!timing_ || !end.timing_) throw_elapsed_needs_timing();
  if (!recorded() || !end.recorded()) throw_elapsed_needs_records();
  if (end.device_.index() != device_.index()) {
    throw_invalid("[event] elapsed_time: the events are on different devices (" +
                  std::to_string(device_.index()) + " and " + std::to_string(end.device_.index()) +
                  "); their timestamps cannot be compared");
  }
  // As torch.mps: wait for both to complete rather than refuse.
  synchronize();
  end.synchronize();
  const double period = device_.backend_device().info().timestamp_period_ns;
  const double start_ns = static_cast<double>(ev_->timestamp_ns) * period;
  const double end_ns = static_cast<double>(end.ev_->timestamp_ns) * period;
  return (end_ns - start_ns) / 1e6;
}

}  // namespace mpsrt::detail
