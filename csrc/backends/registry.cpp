#include "backends/backend.h"

namespace mpsrt::backend {

const std::vector<Backend*>& all_backends() {
  static const std::vector<Backend*> list = {&metal_backend(), &vulkan_backend(), &cpu_backend()};
  return list;
}

}  // namespace mpsrt::backend
