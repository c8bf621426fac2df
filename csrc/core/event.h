// Events: a timeline value per event, recorded on a stream, waited for on the device or host.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/runtime.h"

namespace mpsrt::detail {

class StreamImpl;

/// elapsed_time's refusals (one text each, for Event and EventImpl).
[[noreturn]] MPSRT_COLD void throw_elapsed_needs_timing();
[[noreturn]] MPSRT_COLD void throw_elapsed_needs_records();

class EventImpl {
 public:
  EventImpl(DeviceContext& device, bool timing);
  ~EventImpl();
  EventImpl(const EventImpl&) = delete;
  EventImpl& operator=(const EventImpl&) = delete;

  /// Encodes a signal (and, when timing, a device timestamp) after the stream's work so far.
  void record(StreamImpl& stream);
  /// Makes the stream's later work wait, on the device, for the last record.
  void wait(StreamImpl& stream);
  /// True once the last record has been reached (or when never recorded). One or two atomic
  /// loads.
  bool query() const;
  /// Host wait for the last record.
  void synchronize() const;
  /// Milliseconds between this event and `end`, from device timestamps; waits for both.
  double elapsed_ms(const EventImpl& end) const;

  bool timing() const noexcept { return timing_; }
  bool recorded() const noexcept { return target_.load(std::memory_order_acquire) != 0; }
  int device_index() const noexcept { return device_.index(); }
  /// True in a child process forked after the event was made.
  bool stale() const noexcept { return device_.stale(); }

 private:
  DeviceContext& device_;
  PooledEvent* ev_;
  bool timing_;
  mutable std::mutex mu_;
  std::atomic<uint64_t> target_{0};           // value of the last record; 0: never recorded
  std::atomic<StreamImpl*> stream_{nullptr};  // stream of the last record
  std::atomic<uint64_t> fence_{0};            // its command buffer holding the signal
  // Commits the recording stream if the command buffer holding the signal is still open.
  void flush() const;
};

}  // namespace mpsrt::detail
