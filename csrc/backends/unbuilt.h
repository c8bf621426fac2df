// A backend that was not compiled into this build (see no_vulkan.cpp, no_metal.cpp).
#pragma once

#include <string>

#include "backends/backend.h"
#include "mpsrt/error.h"

namespace mpsrt::backend {

class UnbuiltBackend final : public Backend {
 public:
  UnbuiltBackend(const char* name, const char* pretty) : name_(name), pretty_(pretty) {}
  const char* name() const noexcept override { return name_; }
  bool is_built() const noexcept override { return false; }
  bool is_available() noexcept override { return false; }
  std::string unavailable_reason() override { return message(); }
  int device_count() override { detail::throw_error(message()); }
  std::unique_ptr<Device> open_device(int) override { detail::throw_error(message()); }

 private:
  std::string message() const {
    return std::string("[") + name_ + "] mpsrt was built without " + pretty_;
  }
  const char* name_;
  const char* pretty_;
};

}  // namespace mpsrt::backend
