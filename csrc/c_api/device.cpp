// The C API's devices, memory statistics and tensor kernels (include/mpsrt/c_api.h). Every call
// into the runtime is qualified (mpsrt::...): an unqualified one would find the entry of the
// same name first.
#include <algorithm>
#include <cstring>
#include <string>

#include "c_api/internal.h"
#include "mpsrt/allocator.h"
#include "mpsrt/device.h"
#include "mpsrt/kernel.h"
#include "mpsrt/options.h"

namespace mpsrt::c_api {
namespace {

const char* backend_name() noexcept {
  static const std::string name = [] {
    try {
      return mpsrt::backend_name();
    } catch (...) {
      return std::string("unavailable");
    }
  }();
  return name.c_str();
}

int device_count() noexcept {
  int n = 0;
  guarded([&] { n = mpsrt::device_count(); });
  return n;
}

int current_device() noexcept {
  int d = 0;
  guarded([&] { d = mpsrt::current_device(); });
  return d;
}

MpsrtStatus set_device(int device, int* previous) noexcept {
  return guarded([&] {
    const int prev = mpsrt::set_device(device);
    if (previous) *previous = prev;
  });
}

int host_visible(int device) noexcept {
  int visible = 0;
  guarded([&] {
    Buffer probe(1, mpsrt::current_stream(device));
    visible = probe.host_ptr() != nullptr ? 1 : 0;
  });
  return visible;
}

MpsrtStatus synchronize(int device) noexcept {
  return guarded([&] { mpsrt::synchronize(device); });
}

MpsrtStatus memory_stats(int device, void (*visit)(void*, const char*, int64_t),
                         void* ctx) noexcept {
  return guarded([&] {
    need(visit, "memory_stats", "visit");
    for (const auto& [key, value] : mpsrt::memory_stats(device)) visit(ctx, key.c_str(), value);
  });
}

MpsrtStatus reset_peak_memory_stats(int device) noexcept {
  return guarded([&] { mpsrt::reset_peak_memory_stats(device); });
}

MpsrtStatus reset_accumulated_memory_stats(int device) noexcept {
  return guarded([&] { mpsrt::reset_accumulated_memory_stats(device); });
}

MpsrtStatus empty_cache(int device) noexcept {
  return guarded([&] { mpsrt::empty_cache(device); });
}

MpsrtStatus mem_get_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) noexcept {
  return guarded([&] {
    const auto [f, t] = mpsrt::mem_get_info(device);
    *need(free_bytes, "mem_get_info", "free_bytes") = f;
    *need(total_bytes, "mem_get_info", "total_bytes") = t;
  });
}

// MPSRT_TORCH_KERNELS, as an MpsrtTorchKernels.
int torch_kernels_setting() {
  for (const OptionInfo& o : mpsrt::options()) {
    if (o.name != "MPSRT_TORCH_KERNELS") continue;
    if (o.value == "device") return MPSRT_TORCH_KERNELS_DEVICE;
    if (o.value == "cpu") return MPSRT_TORCH_KERNELS_CPU;
  }
  return MPSRT_TORCH_KERNELS_AUTO;
}

MpsrtStatus device_kernel_info(int device, int* cpu_type, uint64_t* arg_bytes,
                               int* setting) noexcept {
  return guarded([&] {
    const DeviceProperties p = mpsrt::get_device_properties(device);
    if (cpu_type) *cpu_type = p.cpu_type ? 1 : 0;
    if (arg_bytes) *arg_bytes = p.kernel_arg_bytes;
    if (setting) *setting = torch_kernels_setting();
  });
}

uint64_t runtime_generation() noexcept {
  return mpsrt::runtime_generation();
}

int kernel_index(const char* name) noexcept {
  return name != nullptr ? mpsrt::kernel_index(name) : -1;
}

// The C launch as mpsrt::KernelLaunch; std::invalid_argument past the launch's capacities.
KernelLaunch launch_of(const MpsrtKernelLaunch& l) {
  KernelLaunch k;
  k.kernel = l.kernel;
  k.nspec = std::min<uint32_t>(l.nspec, KernelLaunch::kMaxSpec + 1);
  k.nargs = std::min<uint32_t>(l.nargs, KernelLaunch::kMaxArgs + 1);
  k.push_bytes = std::min<uint32_t>(l.push_bytes, KernelLaunch::kMaxPushBytes + 1);
  if (k.nspec > KernelLaunch::kMaxSpec || k.nargs > KernelLaunch::kMaxArgs ||
      k.push_bytes > KernelLaunch::kMaxPushBytes) {
    throw std::invalid_argument(
        "[c_api] kernel_launch: at most 16 constants, 8 arguments and 96 push bytes");
  }
  std::copy(l.spec, l.spec + k.nspec, k.spec);
  for (uint32_t i = 0; i < k.nargs; ++i) {
    k.args[i] = {buf(l.args[i].buffer), l.args[i].offset, l.args[i].nbytes, l.args[i].written != 0};
  }
  std::memcpy(k.push, l.push, k.push_bytes);
  std::copy(l.groups, l.groups + 3, k.groups);
  return k;
}

MpsrtStatus kernel_launch(const MpsrtKernelLaunch* l, MpsrtStream* s) noexcept {
  return guarded([&] {
    const KernelLaunch k = launch_of(*need(l, "kernel_launch", "launch"));
    mpsrt::launch_kernel(k, stream_of_handle(s));
  });
}

}  // namespace

void fill_device(MpsrtCApi& t) {
  t.backend_name = backend_name;
  t.device_count = device_count;
  t.current_device = current_device;
  t.set_device = set_device;
  t.host_visible = host_visible;
  t.synchronize = synchronize;
  t.memory_stats = memory_stats;
  t.reset_peak_memory_stats = reset_peak_memory_stats;
  t.reset_accumulated_memory_stats = reset_accumulated_memory_stats;
  t.empty_cache = empty_cache;
  t.mem_get_info = mem_get_info;
  t.device_kernel_info = device_kernel_info;
  t.kernel_index = kernel_index;
  t.kernel_launch = kernel_launch;
  t.runtime_generation = runtime_generation;
}

}  // namespace mpsrt::c_api
