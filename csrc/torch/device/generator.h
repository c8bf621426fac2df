// torch.Generators on the mpsrt device: mpsrt's Philox generators (the hooks' default and new
// generators), and the generator a random op draws from.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <optional>

#include "device/runtime_client.h"

namespace mpsrt::torch_glue {

// A torch.Generator on the mpsrt device: one of mpsrt's Philox generators. The default
// generator of a device holds no handle and names "the device's default generator" at each
// call, so torch's default generator and mpsrt's (mpsrt.manual_seed, mpsrt.rand) are one.
struct MpsrtGeneratorImpl final : c10::GeneratorImpl {
  MpsrtGeneratorImpl(c10::DeviceIndex d, MpsrtGenerator* handle);
  ~MpsrtGeneratorImpl() override;
  static c10::DeviceType device_type() { return kDev; }
  MpsrtGenerator* handle() const { return handle_; }
  int index() const { return device_.index(); }

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

 private:
  MpsrtGeneratorImpl* clone_impl() const override;
  MpsrtGenerator* handle_;  // owned; nullptr: the device's default generator
};

// The device's default generator (d < 0: the current device's), made at the first call.
const at::Generator& default_generator(c10::DeviceIndex d);
// A new generator on device d (d < 0: the current device).
at::Generator new_generator(c10::DeviceIndex d);

// The mpsrt generator an op draws from on `device`: the given one (which must be an mpsrt
// generator on that device) or the device's default.
MpsrtGeneratorImpl* generator_for(const std::optional<at::Generator>& gen, c10::Device device);

// For random ops mpsrt has no kernel for: a CPU generator seeded from the mpsrt generator's
// stream (64 bits of it), so that those ops too follow torch.mpsrt.manual_seed.
at::Generator cpu_generator_from(MpsrtGeneratorImpl* g);

}  // namespace mpsrt::torch_glue
