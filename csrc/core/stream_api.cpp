// The public stream and event API (mpsrt/stream.h, mpsrt/event.h).
#include <atomic>
#include <string>

#include "core/access.h"
#include "core/event.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/error.h"
#include "mpsrt/event.h"
#include "mpsrt/stream.h"

namespace mpsrt {

using detail::Runtime;

int Stream::device() const noexcept {
  return impl_->device_index();
}
int64_t Stream::id() const noexcept {
  return impl_->id();
}
int Stream::priority() const noexcept {
  return impl_->priority();
}
namespace {
[[noreturn]] MPSRT_COLD void throw_null_stream() {
  detail::throw_invalid(
      "[stream] the Stream is empty (the stream() of an empty Buffer); use default_stream() or "
      "current_stream()");
}
[[noreturn]] MPSRT_COLD void throw_bad_sync_type(SyncType type) {
  detail::throw_invalid("[stream] commit: invalid SyncType " +
                        std::to_string(static_cast<int>(type)) +
                        "; expected None, Commit, CommitAndWait, CommitAndContinue or "
                        "CommitAdaptive");
}
}  // namespace

void Stream::check_owner() const {
  if (MPSRT_UNLIKELY(impl_ == nullptr)) throw_null_stream();
  if (MPSRT_UNLIKELY(impl_->stale())) detail::throw_forked("Stream");
}
void Stream::commit(SyncType type) {
  if (MPSRT_UNLIKELY(static_cast<unsigned>(type) >
                     static_cast<unsigned>(SyncType::CommitAdaptive))) {
    throw_bad_sync_type(type);
  }
  check_owner();
  impl_->commit(type);
}
void Stream::synchronize() {
  check_owner();
  impl_->synchronize();
}
bool Stream::query() {
  check_owner();
  return impl_->query();
}
void Stream::add_callback(std::function<void()> fn) {
  if (!fn) detail::throw_invalid("[stream] add_callback: the callback is empty");
  check_owner();
  impl_->add_callback(std::move(fn));
}

void Stream::wait_event(const Event& event) {
  check_owner();
  event.wait(*this);
}

void Stream::wait_stream(const Stream& other) {
  check_owner();
  other.check_owner();
  if (other.impl_ == impl_) return;
  Event e;
  e.record(other);
  e.wait(*this);
}

Stream default_stream(int device) {
  return detail::Access::make_stream(&Runtime::get().device(device).default_stream());
}

Stream current_stream(int device) {
  return detail::Access::make_stream(&Runtime::get().device(device).current_stream());
}

Stream set_current_stream(const Stream& stream) {
  stream.check_owner();
  detail::DeviceContext& d = Runtime::get().device(stream.device());
  return detail::Access::make_stream(&d.set_current_stream(*detail::Access::impl(stream)));
}

Stream stream_from_pool(int priority, int device) {
  return detail::Access::make_stream(&Runtime::get().device(device).pool_stream(priority));
}

// ---------------------------------------------------------------- Event
namespace {
std::atomic<uint64_t> g_next_event_id{1};
}  // namespace

Event::Event(bool enable_timing)
    : timing_(enable_timing), id_(g_next_event_id.fetch_add(1, std::memory_order_relaxed)) {}
Event::~Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;

namespace {
void check_event_owner(const detail::EventImpl* e) {
  if (MPSRT_UNLIKELY(e != nullptr && e->stale())) detail::throw_forked("Event");
}
}  // namespace

void Event::record(const Stream& stream) {
  stream.check_owner();
  check_event_owner(impl_.get());
  if (!impl_) {
    impl_ = std::make_unique<detail::EventImpl>(Runtime::get().device(stream.device()), timing_);
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
  if (impl_) impl_->wait(Runtime::get().device(impl_->device_index()).current_stream());
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
