// The public device and backend API (mpsrt/device.h) over the runtime (core/runtime.h).
#include <string>
#include <vector>

#include "core/runtime.h"
#include "mpsrt/device.h"

namespace mpsrt {

using detail::Runtime;

bool is_available() {
  return Runtime::get().device_count() > 0;
}

uint64_t runtime_generation() noexcept {
  return Runtime::generation();
}

std::string backend_name() {
  return Runtime::get().backend().name();
}

std::vector<std::string> built_backends() {
  std::vector<std::string> out;
  for (backend::Backend* b : backend::all_backends()) {
    if (b->is_built()) out.emplace_back(b->name());
  }
  return out;
}

std::string backend_reason() {
  return Runtime::get().backend_reason();
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out;
  for (backend::Backend* b : detail::preferred_backends(backend::all_backends())) {
    out.emplace_back(b->name());
  }
  return out;
}

int device_count() {
  return Runtime::get().device_count();
}

int current_device() {
  // Validate lazily: a thread's slot may predate a runtime reset.
  return Runtime::get().resolve(-1);
}

int set_device(int index) {
  Runtime& rt = Runtime::get();
  const int checked = rt.check(index);
  int& slot = detail::current_device_slot();
  const int previous = slot;
  slot = checked;
  return previous;
}

DeviceProperties get_device_properties(int index) {
  Runtime& rt = Runtime::get();
  return rt.device(index).properties(rt.backend().name());
}

void synchronize(int index) {
  Runtime::get().device(index).synchronize();
}

uint64_t driver_allocated_memory(int index) {
  return Runtime::get().device(index).backend_device().driver_allocated_bytes();
}

}  // namespace mpsrt
