#include "mpsrt/error.h"

#include "mpsrt/api.h"

namespace mpsrt {

const char* version() noexcept {
  return MPSRT_VERSION_STRING;
}

namespace detail {
void throw_invalid(const std::string& msg) {
  throw std::invalid_argument(msg);
}
void throw_error(const std::string& msg) {
  throw Error(msg);
}
void throw_oom(const std::string& msg) {
  throw OutOfMemory(msg);
}
}  // namespace detail

}  // namespace mpsrt
