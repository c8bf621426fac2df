// Events: markers recorded on a stream, waited for on the device or the host, timed.
#pragma once

#include <memory>

#include "mpsrt/api.h"
#include "mpsrt/stream.h"

namespace mpsrt {

namespace detail {
class EventImpl;
}

/// A timeline event. It belongs to the device of the stream it is first recorded on. Events
/// are pooled: creating and destroying them allocates no device object once warm.
class MPSRT_API Event {
 public:
  /// An event that is not recorded yet; with enable_timing, its records also take a device
  /// timestamp for elapsed_time().
  explicit Event(bool enable_timing = false);
  ~Event();
  /// Takes the other Event's records; the other is left never recorded.
  Event(Event&&) noexcept;
  /// Lets go of this Event's records, then takes the other's; the other is left never recorded.
  Event& operator=(Event&&) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Marks the point after the stream's work so far (the current stream when omitted).
  void record(const Stream& stream);
  /// Records on the calling thread's current stream of the current device.
  void record();
  /// Makes the stream's later work wait, on the device, for the last record.
  void wait(const Stream& stream) const;
  /// Makes the calling thread's current stream of the event's device wait for the last record.
  /// Neither wait does anything while the event was never recorded.
  void wait() const;
  /// True once the last record's work has completed (then the recording stream's query()
  /// covering it is true too), or when never recorded.
  bool query() const;
  /// Waits on the host for the last record (returns at once when never recorded).
  void synchronize() const;
  /// Milliseconds from this event to `end`, from device timestamps; waits for both to
  /// complete first (as torch.mps). Throws std::invalid_argument unless both have timing
  /// enabled, are recorded, and on one device.
  double elapsed_time(const Event& end) const;
  /// torch's event_id: 0 until the first record(), then a number unique to this Event in the
  /// process, stable for the rest of its life.
  uint64_t id() const noexcept { return id_; }

  /// True when the event was made with timing enabled.
  bool enable_timing() const noexcept { return timing_; }
  /// True once record() has been called.
  bool recorded() const noexcept;
  /// Device of the first record, or -1.
  int device() const noexcept;

 private:
  bool timing_ = false;
  uint64_t id_ = 0;
  std::unique_ptr<detail::EventImpl> impl_;
};

}  // namespace mpsrt
