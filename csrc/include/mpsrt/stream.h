// Streams: ordered queues of work on a device. Each stream batches encoded commands into
// one open command buffer and commits it according to a SyncType.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "mpsrt/api.h"

namespace mpsrt {

namespace detail {
class StreamImpl;
struct Access;
}  // namespace detail
class Event;

/// How a stream hands its open command buffer to the device (after torch.mps's MPSStream).
enum class SyncType {
  None,               ///< keep batching; nothing is committed
  Commit,             ///< commit the open command buffer; do not wait
  CommitAndWait,      ///< commit and wait until it has completed
  CommitAndContinue,  ///< commit; the next command opens a new command buffer at once
  CommitAdaptive,     ///< commit only when the runtime asks for it (memory pressure)
};

/// A handle to a stream. Cheap to copy; streams live as long as their device's runtime.
class MPSRT_API Stream {
 public:
  /// Device index of the stream.
  int device() const noexcept;
  /// Stream id, unique within its device; the default stream is 0.
  int64_t id() const noexcept;
  /// Commits the open command buffer by `type`. Commit and CommitAndWait commit a command
  /// buffer even when nothing was encoded (an empty command buffer), which is how the
  /// device round trip is measured. Throws std::invalid_argument for a value outside SyncType.
  void commit(SyncType type);
  /// Waits until every command committed or encoded so far has completed.
  void synchronize();
  /// True when all work submitted so far has completed.
  bool query();
  /// Priority class: < 0 high, 0 normal, > 0 low (torch.cuda's convention).
  int priority() const noexcept;
  /// Later work on this stream waits, on the device, for the event's last record.
  void wait_event(const Event& event);
  /// Later work on this stream waits, on the device, for `other`'s work so far.
  void wait_stream(const Stream& other);
  /// Runs fn on a runtime thread once the stream's work so far is done. An exception thrown
  /// by fn is reported at the stream's next synchronize().
  void add_callback(std::function<void()> fn);
  /// Throws mpsrt::Error when the stream belongs to the runtime of a parent process (this
  /// process was forked after it was made), std::invalid_argument when the Stream is empty
  /// (Buffer::stream() of an empty Buffer). The operations above and every call taking a
  /// Stream check it.
  void check_owner() const;

  /// True when both handles name the same stream (or both are empty).
  bool operator==(const Stream& o) const noexcept { return impl_ == o.impl_; }
  /// True when the handles name different streams.
  bool operator!=(const Stream& o) const noexcept { return impl_ != o.impl_; }

  /// An opaque value that identifies the stream while its runtime lives: two Streams are
  /// equal exactly when their handles are, and only the empty Stream (Buffer::stream() of an
  /// empty Buffer) has handle 0. For hashing a Stream, and for passing it through C code as a
  /// plain value (the C API's MpsrtStream*, include/mpsrt/c_api.h); from_handle() turns it back
  /// into the Stream. Nothing else is to be read into the value.
  uintptr_t handle() const noexcept { return reinterpret_cast<uintptr_t>(impl_); }
  /// The Stream whose handle() is `handle`. The value must come from handle() of a Stream of
  /// the runtime that is running (0 gives the empty Stream); any other value is undefined
  /// behaviour, as for a dangling pointer.
  static Stream from_handle(uintptr_t handle) noexcept {
    return Stream(reinterpret_cast<detail::StreamImpl*>(handle));
  }

 private:
  friend struct detail::Access;  // the core's way in (csrc/core/access.h)
  explicit Stream(detail::StreamImpl* impl) noexcept : impl_(impl) {}
  detail::StreamImpl* impl_;
};

/// The default stream of a device (-1: the current device).
MPSRT_API Stream default_stream(int device = -1);
/// The calling thread's current stream on a device (the default stream until set).
MPSRT_API Stream current_stream(int device = -1);
/// Makes `stream` the calling thread's current stream on its device; returns the previous one.
MPSRT_API Stream set_current_stream(const Stream& stream);
/// A stream from the device's pool (round-robin per priority class, as torch.cuda).
MPSRT_API Stream stream_from_pool(int priority = 0, int device = -1);

}  // namespace mpsrt
