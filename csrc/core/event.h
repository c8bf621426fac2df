// Events: a timeline value per event, recorded on a stream, waited for on the device or host.
// EventImpl is one event; EventPool is a device's pool of the backend timeline events behind
// them (PooledEvent). The public API (mpsrt/event.h) is in event_api.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/backend.h"
#include "core/device.h"

namespace mpsrt::detail {

class StreamImpl;

/// A backend timeline event with the bookkeeping that lets it be reused: values only grow
/// (a late signal from a previous owner can never complete a newer record), and the
/// timestamp slot the device writes into outlives every command that refers to it.
struct PooledEvent {
  std::unique_ptr<backend::TimelineEvent> event;
  uint64_t last_value = 0;    // highest value ever recorded (guarded by the owner)
  uint64_t timestamp_ns = 0;  // written by the device at the last timed record
};

/// A device's timeline events. Pooled events live as long as the device, so a command still
/// waiting on or signalling a released one stays safe.
class EventPool {
 public:
  explicit EventPool(backend::Device& device) : device_(device) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  /// A free event whose last record has completed, or a new one.
  PooledEvent* acquire();
  void release(PooledEvent* e);
  /// Events acquired and not released (live Events of the device).
  size_t in_use();

 private:
  backend::Device& device_;
  std::mutex mu_;
  std::vector<std::unique_ptr<PooledEvent>> all_;  // guarded by mu_
  std::vector<PooledEvent*> free_;                 // guarded by mu_
};

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
