// torch.Generators on the mpsrt device: see generator.h.
#include "device/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>

#include <array>
#include <mutex>

namespace mpsrt::torch_glue {

MpsrtGeneratorImpl::MpsrtGeneratorImpl(c10::DeviceIndex d, MpsrtGenerator* handle)
    : c10::GeneratorImpl(c10::Device(kDev, d), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      handle_(handle) {}

MpsrtGeneratorImpl::~MpsrtGeneratorImpl() {
  if (handle_ != nullptr && g_api != nullptr) g_api->generator_destroy(handle_);
}

void MpsrtGeneratorImpl::set_current_seed(uint64_t seed) {
  check(api().generator_manual_seed(handle_, index(), seed));
}

void MpsrtGeneratorImpl::set_offset(uint64_t offset) {
  check(api().generator_set_offset(handle_, index(), offset));
}

uint64_t MpsrtGeneratorImpl::get_offset() const {
  uint64_t v = 0;
  check(api().generator_offset(handle_, index(), &v));
  return v;
}

uint64_t MpsrtGeneratorImpl::current_seed() const {
  uint64_t v = 0;
  check(api().generator_initial_seed(handle_, index(), &v));
  return v;
}

uint64_t MpsrtGeneratorImpl::seed() {
  uint64_t v = 0;
  check(api().generator_seed(handle_, index(), &v));
  return v;
}

void MpsrtGeneratorImpl::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.is_contiguous() &&
                  state.device().is_cpu(),
              "[torch] an mpsrt generator's state is a contiguous uint8 CPU tensor of 44 bytes "
              "(get_state()'s), got ",
              state.dtype(), " on ", state.device());
  TORCH_CHECK(state.numel() == 44,
              "RNG state is wrong size: an mpsrt generator's state has 44 "
              "bytes, got ",
              state.numel());
  check(api().generator_set_state(handle_, index(), static_cast<const uint8_t*>(state.data()), 44));
}

c10::intrusive_ptr<c10::TensorImpl> MpsrtGeneratorImpl::get_state() const {
  auto t = at::empty({44}, c10::TensorOptions().dtype(at::kByte));
  check(api().generator_get_state(handle_, index(), t.mutable_data_ptr<uint8_t>(), 44));
  return t.getIntrusivePtr();
}

MpsrtGeneratorImpl* MpsrtGeneratorImpl::clone_impl() const {
  MpsrtGenerator* h = nullptr;
  check(api().generator_clone_state(handle_, index(), &h));
  return new MpsrtGeneratorImpl(device_.index(), h);
}

const at::Generator& default_generator(c10::DeviceIndex d) {
  if (d < 0) d = current_index();
  check_index(d);
  static std::mutex mu;
  static std::array<at::Generator, 64> gens;  // c10::DeviceIndex is int8: at most 127 devices
  TORCH_CHECK(d < static_cast<c10::DeviceIndex>(gens.size()), "[torch] device index ",
              static_cast<int>(d), " is past the 64 devices the mpsrt PyTorch device supports");
  std::lock_guard<std::mutex> lock(mu);
  if (!gens[d].defined()) gens[d] = at::make_generator<MpsrtGeneratorImpl>(d, nullptr);
  return gens[d];
}

at::Generator new_generator(c10::DeviceIndex d) {
  if (d < 0) d = current_index();
  check_index(d);
  MpsrtGenerator* h = nullptr;
  check(api().generator_create(d, &h));
  return at::make_generator<MpsrtGeneratorImpl>(d, h);
}

MpsrtGeneratorImpl* generator_for(const std::optional<at::Generator>& gen, c10::Device device) {
  if (!gen.has_value() || !gen->defined()) {
    return static_cast<MpsrtGeneratorImpl*>(
        default_generator(device.index()).unsafeGetGeneratorImpl());
  }
  TORCH_CHECK(gen->device().type() == kDev, "Expected a '", c10::Device(kDev),
              "' device type for generator but found '", gen->device().type(), "'");
  TORCH_CHECK_VALUE(gen->device().index() == device.index(), "[torch] the generator is on ",
                    gen->device(), " but the tensor is on ", device,
                    "; use a generator of the tensor's device");
  return static_cast<MpsrtGeneratorImpl*>(gen->unsafeGetGeneratorImpl());
}

at::Generator cpu_generator_from(MpsrtGeneratorImpl* g) {
  uint64_t seed = 0;
  check(api().generator_random_u64(g->handle(), g->index(), &seed));
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace mpsrt::torch_glue
