// The public options API (mpsrt/options.h) over the runtime's options table (core/options.h).
#include <vector>

#include "core/options.h"
#include "core/runtime.h"
#include "mpsrt/options.h"

namespace mpsrt {

std::vector<OptionInfo> options() {
  return detail::describe_options(detail::Runtime::get().options());
}

}  // namespace mpsrt
