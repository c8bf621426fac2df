// The device-kernel layer of the glue (kernels.h): the mode, tensors as kernel arguments,
// launches through the C API, and the boxed registration with the fallback behind it.
#include "kernels.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "fallback.h"
#include "host_access.h"
#include "host_ops.h"

namespace mpsrt::torch_glue::kernels {
namespace {

constexpr int kModeUnset = -1;
std::atomic<int> g_mode{kModeUnset};  // an MpsrtTorchKernels, or unset (the option's value)

constexpr size_t kMaxDevices = 64;
// What the runtime says of a device, asked once (forget() asks again: the tests re-create the
// runtime on another backend in one process).
struct DeviceFacts {
  std::atomic<bool> known{false};
  int cpu_type = 0;
  uint64_t arg_bytes = 0;
  int setting = MPSRT_TORCH_KERNELS_AUTO;
};
std::array<DeviceFacts, kMaxDevices> g_facts;
std::mutex g_facts_mu;

DeviceFacts& facts(c10::DeviceIndex d) {
  DeviceFacts& f = g_facts.at(static_cast<size_t>(d));
  if (C10_LIKELY(f.known.load(std::memory_order_acquire))) return f;
  std::lock_guard<std::mutex> lock(g_facts_mu);
  if (!f.known.load(std::memory_order_relaxed)) {
    check(api().device_kernel_info(d, &f.cpu_type, &f.arg_bytes, &f.setting));
    f.known.store(true, std::memory_order_release);
  }
  return f;
}

int mode_value() {
  const int m = g_mode.load(std::memory_order_relaxed);
  return m != kModeUnset ? m : facts(0).setting;
}

const char* mode_name(int m) {
  return m == MPSRT_TORCH_KERNELS_DEVICE ? "device" : m == MPSRT_TORCH_KERNELS_CPU ? "cpu" : "auto";
}

}  // namespace

bool enabled(c10::DeviceIndex d) {
  const DeviceFacts& f = facts(d);
  if (f.arg_bytes == 0) return false;
  const int m = mode_value();
  return m == MPSRT_TORCH_KERNELS_DEVICE || (m == MPSRT_TORCH_KERNELS_AUTO && f.cpu_type == 0);
}

void forget() {
  std::lock_guard<std::mutex> lock(g_facts_mu);
  for (DeviceFacts& f : g_facts) f.known.store(false, std::memory_order_relaxed);
  g_mode.store(kModeUnset, std::memory_order_relaxed);
}

std::string mode() {
  return mode_name(mode_value());
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

Launch::Launch(const char* kernel, c10::DeviceIndex device) : device_(device) {
  l_.kernel = api().kernel_index(kernel);
  TORCH_INTERNAL_ASSERT(l_.kernel >= 0, "[torch] mpsrt has no kernel named ", kernel);
  l_.groups[0] = l_.groups[1] = l_.groups[2] = 1;
}

Launch& Launch::spec(uint32_t v) {
  TORCH_INTERNAL_ASSERT(l_.nspec < 16, "[torch] too many specialisation constants");
  l_.spec[l_.nspec++] = v;
  return *this;
}

Launch& Launch::arg_bytes(const at::Tensor& t, int64_t first, size_t nbytes, bool written) {
  if (l_.nargs >= 8 || !is_mpsrt(t) || t.device().index() != device_) throw Declined{};
  size_t offset = 0;
  MpsrtBuffer* b = buffer_of(t, &offset);
  if (b == nullptr || nbytes == 0 || nbytes > facts(device_).arg_bytes) throw Declined{};
  if (first < 0 && static_cast<size_t>(-first) > offset) throw Declined{};
  l_.args[l_.nargs++] = {b, offset + first, nbytes, written ? 1 : 0};
  return *this;
}

Launch& Launch::arg(const at::Tensor& t, bool written) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) throw Declined{};
    if (t.size(d) == 0) throw Declined{};
    last += (t.size(d) - 1) * t.stride(d);
  }
  const size_t itemsize = t.dtype().itemsize();
  return arg_bytes(t, 0, static_cast<size_t>(last + 1) * itemsize, written);
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

void Launch::run() {
  check(api().kernel_launch(&l_, current_stream(device_)));
}

namespace {

// The device of the op's first mpsrt tensor argument (also inside tensor lists), or -1.
c10::DeviceIndex device_of(const c10::OperatorHandle& op, const torch::jit::Stack& s) {
  const size_t n = op.schema().arguments().size();
  for (size_t i = s.size() - n; i < s.size(); ++i) {
    const c10::IValue& v = s[i];
    if (v.isTensor()) {
      if (is_mpsrt(v.toTensor())) return v.toTensor().device().index();
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (is_mpsrt(t)) return t.device().index();
      }
    }
  }
  return -1;
}

}  // namespace

const c10::IValue& arg(const c10::OperatorHandle& op, const torch::jit::Stack& s, size_t i) {
  return s[s.size() - op.schema().arguments().size() + i];
}

void finish(const c10::OperatorHandle& op, torch::jit::Stack& s, c10::IValue result) {
  torch::jit::drop(s, op.schema().arguments().size());
  s.push_back(std::move(result));
}

namespace {

// The kernels by operator name: every registration runs while the library loads (static
// initialisation, one thread), lookups after it. One boxed function serves them all.
std::unordered_map<c10::OperatorName, Kernel>& registry() {
  static std::unordered_map<c10::OperatorName, Kernel> r;
  return r;
}

Kernel kernel_for(const c10::OperatorHandle& op) {
  const auto it = registry().find(op.operator_name());
  return it != registry().end() ? it->second : nullptr;
}

}  // namespace

void run_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::DeviceIndex d = device_of(op, *stack);
  if (d >= 0 && enabled(d)) {
    const Kernel k = kernel_for(op);
    try {
      if (k != nullptr && k(op, *stack)) return;
    } catch (const Declined&) {
    }
  }
  cpu_fallback(op, stack);
}

bool has_kernel(const c10::OperatorHandle& op) {
  return kernel_for(op) != nullptr;
}

std::vector<std::string> kernel_ops() {
  std::vector<std::string> out;
  for (const auto& [name, k] : registry()) {
    (void)k;
    out.push_back(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void impl(torch::Library& m, const char* name, Kernel k) {
  const std::string full = std::string("aten::") + name;
  const size_t dot = full.find('.');
  registry()[c10::OperatorName(dot == std::string::npos ? full : full.substr(0, dot),
                               dot == std::string::npos ? "" : full.substr(dot + 1))] = k;
  if (auto typed = host_ops::typed_kernel(name)) {
    m.impl(name, std::move(*typed));
  } else {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_boxed>());
  }
}

}  // namespace mpsrt::torch_glue::kernels
