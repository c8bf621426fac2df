// torch's PrivateUse1 hooks for the mpsrt device: see hooks.h. What they serve lives with its
// concept: generators (generator.cpp), pinned memory and storage growth (allocator.cpp).
#include "device/hooks.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "device/allocator.h"
#include "device/generator.h"
#include "device/runtime_client.h"

namespace mpsrt::torch_glue {
namespace {

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_api != nullptr && g_api->device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(api().device_count());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    check_index(d);
    check(api().set_device(d, nullptr));
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_index(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    int prev = 0;
    check_index(d);
    check(api().set_device(d, &prev));
    return static_cast<c10::DeviceIndex>(prev);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    return default_generator(d);
  }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override { return new_generator(d); }
  at::Device getDeviceFromPtr(void*) const override { return {kDev, current_index()}; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_bytes(storage, newsize);
  }
};

}  // namespace

void register_hooks() {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
}

}  // namespace mpsrt::torch_glue
