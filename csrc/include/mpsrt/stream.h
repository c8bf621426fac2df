// Streams: ordered queues of work on a device. Each stream batches encoded commands into
// one open command buffer and commits it according to a SyncType.
#pragma once

#include <cstdint>
#include <memory>

#include "mpsrt/api.h"

namespace mpsrt {

namespace detail {
class StreamImpl;
}

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
  /// device round trip is measured.
  void commit(SyncType type);
  /// Waits until every command committed or encoded so far has completed.
  void synchronize();
  /// True when all work submitted so far has completed.
  bool query();

  bool operator==(const Stream& o) const noexcept { return impl_ == o.impl_; }
  bool operator!=(const Stream& o) const noexcept { return impl_ != o.impl_; }

  explicit Stream(detail::StreamImpl* impl) noexcept : impl_(impl) {}
  detail::StreamImpl* impl() const noexcept { return impl_; }

 private:
  detail::StreamImpl* impl_;
};

/// The default stream of a device (-1: the current device).
MPSRT_API Stream default_stream(int device = -1);

}  // namespace mpsrt
