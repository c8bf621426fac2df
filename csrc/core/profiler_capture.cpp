// GPU capture for the platform's GPU debugger (mpsrt/profiler.h: capture_available,
// begin_capture, end_capture, is_capturing): one capture of one device at a time, through its
// backend device.
#include <atomic>
#include <mutex>
#include <string>

#include "core/runtime.h"
#include "mpsrt/error.h"
#include "mpsrt/profiler.h"

namespace mpsrt::profiler {

using detail::Runtime;

namespace {
std::mutex g_capture_mu;
std::atomic<int> g_capture_device{-1};  // the captured device's index, -1 when none
}  // namespace

bool capture_available() {
  return Runtime::get().device(-1).backend_device().capture_available(nullptr);
}

void begin_capture(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (g_capture_device.load() >= 0) {
    detail::throw_error("[profiler] begin_capture: a GPU capture already runs; end it first");
  }
  Runtime& rt = Runtime::get();
  const int index = rt.resolve(-1);
  backend::Device& dev = rt.device(index).backend_device();
  std::string why;
  if (!dev.capture_available(&why)) detail::throw_error("[profiler] begin_capture: " + why);
  dev.begin_capture(path);
  g_capture_device.store(index);
}

void end_capture() {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  const int index = g_capture_device.load();
  if (index < 0) return;
  g_capture_device.store(-1);
  detail::DeviceContext& d = Runtime::get().device(index);
  d.wait_idle();  // the captured work completes inside the capture
  d.backend_device().end_capture();
}

bool is_capturing() noexcept {
  return g_capture_device.load() >= 0;
}

}  // namespace mpsrt::profiler
