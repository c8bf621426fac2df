// torch's profiler stubs for the mpsrt device (torch::profiler::impl::registerPrivateUse1Methods),
// what `torch.autograd.profiler.profile(use_device="mpsrt")` calls around every operator: an
// mpsrt timing event recorded on the current stream at the op's entry and exit, whose elapsed
// time is the op's device time (key_averages()'s self_device_time_total). Without them torch's
// default stubs fail every call ("PrivateUse1 used in profiler but not enabled") and the events
// carry garbage times. mark/rangePush/rangePop (torch's NVTX-style annotations, which only
// torch.autograd.profiler.emit_nvtx-like modes call) have nothing to map to: mpsrt's profiler
// sessions name host operations by their own intervals (fallback.cpp), so they are no-ops.
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <functional>
#include <memory>

#include "device/runtime_client.h"

namespace mpsrt::torch_glue {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct ProfilerMethods final : torch::profiler::impl::ProfilerStubs {
  // A timing event recorded on the current device's current stream, the CPU time taken just
  // before (torch's CUDA stubs order them so).
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex d = current_index();
    if (device != nullptr) *device = d;
    MpsrtEvent* e = nullptr;
    check(api().event_create(/*enable_timing=*/1, &e));
    *event = std::shared_ptr<void>(e, [](void* p) {
      if (g_api != nullptr) g_api->event_destroy(static_cast<MpsrtEvent*>(p));
    });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    check(api().event_record(e, current_stream(d)));
  }

  // The device time between two records, in microseconds (waits for both). 0 when either is
  // missing, and, with a warning (once), when they cannot be compared (an op that changed the
  // current device between its entry and exit): torch reads these while it builds its tables,
  // where an exception would lose the whole profile (torch's CUDA path warns likewise).
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    if (start == nullptr || end == nullptr || !*start || !*end) return 0.F;
    auto* s = static_cast<MpsrtEvent*>(start->get());
    auto* e = static_cast<MpsrtEvent*>(end->get());
    double ms = 0;
    if (api().event_elapsed_ms(s, e, &ms) != MPSRT_OK) {  // waits for both events
      TORCH_WARN_ONCE("[torch] profiler: an op's device time cannot be measured (",
                      api().last_error(), "); it counts as 0");
      return 0.F;
    }
    return static_cast<float>(ms * 1000.0);
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(c10::Device(kDev, current_index()));
    const int n = api().device_count();
    for (int i = 0; i < n; ++i) {
      guard.set_index(static_cast<c10::DeviceIndex>(i));
      op(i);
    }
  }

  // The current device's queued work done (torch's CUDA stubs: cudaDeviceSynchronize).
  void synchronize() const override { check(api().synchronize(current_index())); }
};

// Registered when the library loads (torch keeps the pointer: a static that outlives it).
const bool g_profiler_stubs_registered = [] {
  static ProfilerMethods methods;
  torch::profiler::impl::registerPrivateUse1Methods(&methods);
  return true;
}();

}  // namespace
}  // namespace mpsrt::torch_glue
