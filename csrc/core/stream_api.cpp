// The public stream API (mpsrt/stream.h) over the core's streams (core/stream.h).
#include <string>

#include "core/access.h"
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
  return detail::Access::make_stream(&Runtime::get().device(device).streams().default_stream());
}

Stream current_stream(int device) {
  return detail::Access::make_stream(&Runtime::get().device(device).streams().current());
}

Stream set_current_stream(const Stream& stream) {
  stream.check_owner();
  detail::DeviceStreams& streams = Runtime::get().device(stream.device()).streams();
  return detail::Access::make_stream(&streams.set_current(*detail::Access::impl(stream)));
}

Stream stream_from_pool(int priority, int device) {
  return detail::Access::make_stream(
      &Runtime::get().device(device).streams().pool_stream(priority));
}

}  // namespace mpsrt
