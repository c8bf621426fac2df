// The launch layer of the glue (launch.h): the mode, tensors as kernel arguments, launches
// through the C API; and the table of ops with device kernels (register.h).
#include "ops/launch.h"

#include <ATen/ScalarOps.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "device/host_access.h"
#include "ops/common.h"

namespace mpsrt::torch_glue::ops {
namespace {

// The runtime's generation (C API runtime_generation) + 1 that a cached value was taken in; 0:
// none. A re-created runtime (a fork's child, the tests' reset onto another backend) makes
// every cached value stale: its devices and options are asked again.
uint64_t stamp() {
  return api().runtime_generation() + 1;
}

// The mode set_mode chose, for the runtime generation it was set in (else the option's value).
std::atomic<int> g_mode{MPSRT_TORCH_KERNELS_AUTO};
std::atomic<uint64_t> g_mode_stamp{0};

constexpr size_t kMaxDevices = 64;
// What the runtime says of a device, asked once per runtime generation.
struct DeviceFacts {
  std::atomic<uint64_t> stamp{0};
  int cpu_type = 0;
  uint64_t arg_bytes = 0;
  int setting = MPSRT_TORCH_KERNELS_AUTO;
  bool unified = false;
};
std::array<DeviceFacts, kMaxDevices> g_facts;
std::mutex g_facts_mu;

// Device d's facts in the runtime generation `now` (stamp()). Cost: one load.
DeviceFacts& facts(c10::DeviceIndex d, uint64_t now) {
  DeviceFacts& f = g_facts.at(static_cast<size_t>(d));
  if (C10_LIKELY(f.stamp.load(std::memory_order_acquire) == now)) return f;
  std::lock_guard<std::mutex> lock(g_facts_mu);
  if (f.stamp.load(std::memory_order_relaxed) != now) {
    check(api().device_kernel_info(d, &f.cpu_type, &f.arg_bytes, &f.setting));
    f.unified = api().host_visible(d) != 0;
    f.stamp.store(now, std::memory_order_release);
  }
  return f;
}

int mode_value(uint64_t now) {
  if (g_mode_stamp.load(std::memory_order_acquire) == now) {
    return g_mode.load(std::memory_order_relaxed);
  }
  return facts(0, now).setting;
}

const char* mode_name(int m) {
  return m == MPSRT_TORCH_KERNELS_DEVICE ? "device" : m == MPSRT_TORCH_KERNELS_CPU ? "cpu" : "auto";
}

}  // namespace

DeviceMode device_mode(c10::DeviceIndex d) {
  const uint64_t now = stamp();  // one C API call per question
  const DeviceFacts& f = facts(d, now);
  const int m = mode_value(now);
  const bool kernels = f.arg_bytes != 0 && (m == MPSRT_TORCH_KERNELS_DEVICE ||
                                            (m == MPSRT_TORCH_KERNELS_AUTO && f.cpu_type == 0));
  return {kernels, f.unified, now - 1};
}

bool enabled(c10::DeviceIndex d) {
  return device_mode(d).kernels;
}

std::string mode() {
  return mode_name(mode_value(stamp()));
}

std::string set_mode(const std::string& m) {
  int v = 0;
  if (m == "auto") {
    v = MPSRT_TORCH_KERNELS_AUTO;
  } else if (m == "device") {
    v = MPSRT_TORCH_KERNELS_DEVICE;
  } else if (m == "cpu") {
    v = MPSRT_TORCH_KERNELS_CPU;
  } else {
    TORCH_CHECK_VALUE(false, "[torch] kernels mode '", m,
                      "' is not valid: expected auto, device or cpu (as MPSRT_TORCH_KERNELS)");
  }
  const std::string previous = mode();
  g_mode.store(v, std::memory_order_relaxed);
  g_mode_stamp.store(stamp(), std::memory_order_release);
  return previous;
}

int dtype_id(at::ScalarType t) {
  switch (t) {
    case at::kByte:
      return MPSRT_DTYPE_UINT8;
    case at::kInt:
      return MPSRT_DTYPE_INT32;
    case at::kLong:
      return MPSRT_DTYPE_INT64;
    case at::kUInt32:
      return MPSRT_DTYPE_UINT32;
    case at::kHalf:
      return MPSRT_DTYPE_FLOAT16;
    case at::kBFloat16:
      return MPSRT_DTYPE_BFLOAT16;
    case at::kFloat:
      return MPSRT_DTYPE_FLOAT32;
    case at::kDouble:
      return MPSRT_DTYPE_FLOAT64;
    case at::kBool:
      return MPSRT_DTYPE_BOOL;
    case at::kChar:
      return MPSRT_DTYPE_INT8;
    case at::kShort:
      return MPSRT_DTYPE_INT16;
    case at::kUInt16:
      return MPSRT_DTYPE_UINT16;
    case at::kUInt64:
      return MPSRT_DTYPE_UINT64;
    default:
      return -1;
  }
}

namespace {

// The kernel named `name` (the runtime's kernel_index), cached by the name's address: the ops
// name their kernels with string literals, so after an op's first launch this is one load and a
// compare, not a search of the names. A slot packs the address (user-space addresses fit 48
// bits) and the index in one word, so that threads filling slots at once never pair one name's
// address with another's index.
int kernel_of(const char* name) {
  static std::atomic<uint64_t> slots[128];
  const auto addr = reinterpret_cast<uintptr_t>(name);
  std::atomic<uint64_t>& slot = slots[(addr >> 3) % 128];
  const uint64_t seen = slot.load(std::memory_order_relaxed);
  if (seen >> 16 == addr && addr != 0) return static_cast<int>(seen & 0xffff);
  const int index = api().kernel_index(name);
  if (index >= 0 && index <= 0xffff && addr < (uint64_t(1) << 48)) {
    slot.store(uint64_t(addr) << 16 | uint64_t(index), std::memory_order_relaxed);
  }
  return index;
}

}  // namespace

Launch::Launch(const char* kernel, c10::DeviceIndex device) : device_(device) {
  l_.kernel = kernel_of(kernel);
  TORCH_INTERNAL_ASSERT(l_.kernel >= 0, "[torch] mpsrt has no kernel named ", kernel);
  l_.groups[0] = l_.groups[1] = l_.groups[2] = 1;
}

Launch& Launch::spec(uint32_t id, uint32_t v) {
  TORCH_INTERNAL_ASSERT(id < 16, "[torch] specialisation constant ", id, " out of 0..15");
  l_.spec[id] = v;
  l_.nspec = std::max<uint32_t>(l_.nspec, id + 1);
  return *this;
}

Launch& Launch::arg_bytes(const at::Tensor& t, int64_t first, size_t nbytes, bool written) {
  if (!ok_ || l_.nargs >= 8 || !is_mpsrt(t) || t.device().index() != device_) {
    ok_ = false;
    return *this;
  }
  size_t offset = 0;
  MpsrtBuffer* b = buffer_of(t, &offset);
  ok_ = b != nullptr && nbytes != 0 && nbytes <= facts(device_, stamp()).arg_bytes &&
        (first >= 0 || static_cast<size_t>(-first) <= offset);
  if (ok_) l_.args[l_.nargs++] = {b, offset + first, nbytes, written ? 1 : 0};
  return *this;
}

Launch& Launch::arg(const at::Tensor& t, bool written) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0 || t.size(d) == 0) {
      ok_ = false;
      return *this;
    }
    last += (t.size(d) - 1) * t.stride(d);
  }
  const size_t itemsize = t.dtype().itemsize();
  return arg_bytes(t, 0, static_cast<size_t>(last + 1) * itemsize, written);
}

Launch& Launch::fill_args(uint32_t like, uint32_t n) {
  if (!ok_ || like >= l_.nargs || n > 8) {
    ok_ = false;
    return *this;
  }
  while (l_.nargs < n) {
    l_.args[l_.nargs] = l_.args[like];
    l_.args[l_.nargs++].written = 0;
  }
  return *this;
}

Launch& Launch::grid(uint64_t items, uint32_t local) {
  uint64_t groups = std::max<uint64_t>((items + local - 1) / local, 1);
  // Grid-stride loops cover what a grid of at most 65535 x 1024 groups does not.
  groups = std::min<uint64_t>(groups, uint64_t(65535) * 1024);
  const uint64_t y = (groups + 65534) / 65535;
  l_.groups[0] = static_cast<uint32_t>((groups + y - 1) / y);
  l_.groups[1] = static_cast<uint32_t>(y);
  l_.groups[2] = 1;
  return *this;
}

Launch& Launch::groups(uint32_t x, uint32_t y, uint32_t z) {
  l_.groups[0] = x;
  l_.groups[1] = y;
  l_.groups[2] = z;
  return *this;
}

bool Launch::run() {
  if (!ok_) return false;
  check(api().kernel_launch(&l_, current_stream(device_)));
  return true;
}

void detail::same_device_error(c10::DeviceIndex d) {
  // TensorIterator's words (the first non-CPU device, then the CPU), as torch.cuda raises them.
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              c10::Device(kDev, d), " and cpu!");
}

c10::DeviceIndex detail::stack_device(const c10::OperatorHandle& op, const torch::jit::Stack& s) {
  const size_t n = op.schema().arguments().size();
  for (size_t i = s.size() - n; i < s.size(); ++i) {
    const c10::IValue& v = s[i];
    if (v.isTensor()) {
      if (is_mpsrt(v.toTensor())) return v.toTensor().device().index();
    } else if (v.isTensorList()) {
      for (const at::Tensor t : v.toTensorList()) {
        if (is_mpsrt(t)) return t.device().index();
      }
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        if (t && is_mpsrt(*t)) return t->device().index();
      }
    }
  }
  return -1;
}

at::Tensor as_tensor(const at::Tensor& t) {
  return t;
}
at::Tensor as_tensor(const c10::Scalar& s) {
  return at::native::wrapped_scalar_tensor(s);
}

namespace {

std::vector<std::string>& kernel_names() {
  static std::vector<std::string> names;  // written while the library loads (one thread)
  return names;
}

}  // namespace

void detail::note_kernel(const char* name, const char* overload) {
  std::string n = name;
  if (overload[0] != '\0') n += std::string(".") + overload;
  kernel_names().push_back(std::move(n));
}

std::vector<std::string> kernel_ops() {
  std::vector<std::string> out = kernel_names();
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace mpsrt::torch_glue::ops
