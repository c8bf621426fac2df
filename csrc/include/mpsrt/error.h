// mpsrt error convention: messages read "[component] what happened; what to do".
//   std::invalid_argument  -> Python ValueError   (a bad value from the caller)
//   mpsrt::OutOfMemory     -> mpsrt.OutOfMemoryError (a RuntimeError)
//   mpsrt::Error and other std::exception -> RuntimeError (device, driver, runtime state)
#pragma once

#include <stdexcept>
#include <string>

#include "mpsrt/api.h"

namespace mpsrt {

/// A failure of the runtime, the device or the driver.
class MPSRT_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An allocation that could not be satisfied even after the out-of-memory ladder.
class MPSRT_API OutOfMemory : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Cold, out-of-line throw helpers: keep the fast paths free of string building.
[[noreturn]] MPSRT_API MPSRT_COLD void throw_invalid(const std::string& msg);
[[noreturn]] MPSRT_API MPSRT_COLD void throw_error(const std::string& msg);
[[noreturn]] MPSRT_API MPSRT_COLD void throw_oom(const std::string& msg);
}  // namespace detail

}  // namespace mpsrt
