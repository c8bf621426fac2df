// The profiler's os_signpost sink: a session's command encodes and completions, marks and
// ranges also go to os_signpost (subsystem "mpsrt", category PointsOfInterest), where
// Instruments shows them. The metal backend offers it as its backend::TraceSink, which the
// runtime installs while it runs the metal backend.
#import <Foundation/Foundation.h>
#include <os/log.h>
#include <os/signpost.h>

#include <string>
#include <string_view>

#include "backends/metal/metal_common.h"

namespace mpsrt::metal {
namespace {

class SignpostSink final : public backend::TraceSink {
 public:
  SignpostSink() : log_(os_log_create("mpsrt", OS_LOG_CATEGORY_POINTS_OF_INTEREST)) {}

  // Each os_signpost_* macro formats nothing unless signposts of log_ are on (Instruments
  // records them); the names and formats are literals, as os_signpost requires.
  void encode(const char* op, int64_t stream, uint64_t bytes) override {
    os_signpost_event_emit(log_, OS_SIGNPOST_ID_EXCLUSIVE, "encode",
                           "%{public}s stream=%lld bytes=%llu", op, static_cast<long long>(stream),
                           static_cast<unsigned long long>(bytes));
  }

  void completed(const char* op, int64_t stream, uint64_t device_ns) override {
    os_signpost_event_emit(
        log_, OS_SIGNPOST_ID_EXCLUSIVE, "completed", "%{public}s stream=%lld device_ns=%llu", op,
        static_cast<long long>(stream), static_cast<unsigned long long>(device_ns));
  }

  void mark(std::string_view message) override {
    if (!os_signpost_enabled(log_)) return;
    const std::string m(message);  // %s wants a NUL-terminated string
    os_signpost_event_emit(log_, OS_SIGNPOST_ID_EXCLUSIVE, "mark", "%{public}s", m.c_str());
  }

  // Ranges of one name overlap across threads: each gets a generated id.
  uint64_t range_begin(std::string_view message) override {
    const os_signpost_id_t id = os_signpost_id_generate(log_);
    if (id != OS_SIGNPOST_ID_NULL && os_signpost_enabled(log_)) {
      const std::string m(message);
      os_signpost_interval_begin(log_, id, "range", "%{public}s", m.c_str());
    }
    return id;
  }

  // An empty format rather than none: C++17 does not allow an empty variadic part of a macro
  // and os/signpost.h's inner macro passes it on without GNU comma pasting (-Wpedantic).
  void range_end(uint64_t id) override {
    os_signpost_interval_end(log_, static_cast<os_signpost_id_t>(id), "range", "");
  }

 private:
  os_log_t log_;
};

}  // namespace

backend::TraceSink* signpost_sink() {
  // Never destroyed: threads may still trace while the process exits.
  static SignpostSink* const sink = new SignpostSink;
  return sink;
}

}  // namespace mpsrt::metal
