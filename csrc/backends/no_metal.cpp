// Built when the Metal backend is not (every non-Apple build): reports itself unavailable.
#include "backends/unbuilt.h"

namespace mpsrt::backend {
Backend& metal_backend() {
  static UnbuiltBackend b("metal", "Metal");
  return b;
}
}  // namespace mpsrt::backend
