// The public event API (mpsrt/event.h) over the core's events (core/event.h).
#include <atomic>

#include "core/access.h"
#include "core/event.h"
#include "core/runtime.h"
#include "mpsrt/event.h"
#include "mpsrt/stream.h"

namespace mpsrt {

using detail::Runtime;

namespace {
std::atomic<uint64_t> g_next_event_id{1};

void check_event_owner(const detail::EventImpl* e) {
  if (MPSRT_UNLIKELY(e != nullptr && e->stale())) detail::throw_forked("Event");
}
}  // namespace

Event::Event(bool enable_timing) : timing_(enable_timing) {}
Event::~Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;

void Event::record(const Stream& stream) {
  stream.check_owner();
  check_event_owner(impl_.get());
  if (!impl_) {
    impl_ = std::make_unique<detail::EventImpl>(Runtime::get().device(stream.device()), timing_);
    id_ = g_next_event_id.fetch_add(1, std::memory_order_relaxed);  // torch's: 0 until recorded
  }
  impl_->record(*detail::Access::impl(stream));
}

void Event::record() {
  record(current_stream());
}

void Event::wait(const Stream& stream) const {
  stream.check_owner();
  check_event_owner(impl_.get());
  if (impl_) impl_->wait(*detail::Access::impl(stream));
}

void Event::wait() const {
  check_event_owner(impl_.get());
  if (impl_) impl_->wait(Runtime::get().device(impl_->device_index()).streams().current());
}

bool Event::query() const {
  check_event_owner(impl_.get());
  return !impl_ || impl_->query();
}

void Event::synchronize() const {
  check_event_owner(impl_.get());
  if (impl_) impl_->synchronize();
}

double Event::elapsed_time(const Event& end) const {
  if (!timing_ || !end.timing_) detail::throw_elapsed_needs_timing();
  if (!impl_ || !end.impl_) detail::throw_elapsed_needs_records();
  check_event_owner(impl_.get());
  check_event_owner(end.impl_.get());
  return impl_->elapsed_ms(*end.impl_);
}

bool Event::recorded() const noexcept {
  return impl_ && impl_->recorded();
}
int Event::device() const noexcept {
  return impl_ ? impl_->device_index() : -1;
}

}  // namespace mpsrt
