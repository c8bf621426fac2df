// Tensor kernels through the public API (mpsrt/kernel.h): the library's names, which devices run
// them, launches on a stream (with the elementwise kernel, csrc/kernels/elementwise.comp) and
// the launches the runtime refuses. Every test runs on each backend that is built and
// available, and on vulkan with the discrete memory model forced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "mpsrt/mpsrt.h"

namespace {

using mpsrt::Buffer;
using mpsrt::KernelLaunch;
using mpsrt::detail::Runtime;

class TensorKernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string backend = GetParam();
    const bool discrete = backend == "vulkan_discrete";
    if (discrete) backend = "vulkan";
    env_ = {{"MPSRT_BACKEND", backend}};
    if (discrete) env_["MPSRT_VULKAN_MEMORY"] = "discrete";
    const mpsrt::detail::EnvLookup lookup = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
    props_ = mpsrt::get_device_properties(0);
  }
  void TearDown() override { Runtime::reset(nullptr); }

  std::map<std::string, std::string> env_;
  mpsrt::DeviceProperties props_;
};

// elementwise.comp's push constants after the runtime's base[8].
struct EwPush {
  uint32_t n;
  uint32_t sizes[4];
  int32_t strides[16];
  float p[3];
};

// out = a + alpha * b (op 1) over n contiguous float32 elements, or out = a * b (op 3): inputs
// a and b, and alpha as a scalar third input (its value in its first stride slot).
KernelLaunch elementwise(uint32_t op, const Buffer& out, const Buffer& a, const Buffer& b,
                         uint32_t n, float alpha) {
  KernelLaunch k;
  k.kernel = mpsrt::kernel_index("elementwise");
  // op, 1 dim, dtypes mpsrt::DType::F32 (6), 3 inputs, float math, input 3 a scalar, variant 0
  const uint32_t spec[] = {op, 1, 6, 6, 6, 6, 3, 0, 1u << 3, 0};
  k.nspec = 10;
  std::copy(spec, spec + 10, k.spec);
  k.nargs = 4;
  k.args[0] = {&out, 0, out.nbytes(), true};
  k.args[1] = {&a, 0, a.nbytes(), false};
  k.args[2] = {&b, 0, b.nbytes(), false};
  k.args[3] = {&out, 0, out.nbytes(), false};  // a scalar input: bound, never read
  EwPush p{};
  p.n = n;
  p.sizes[0] = n;
  p.sizes[1] = p.sizes[2] = p.sizes[3] = 1;
  p.strides[0] = p.strides[4] = p.strides[8] = 1;
  std::memcpy(&p.strides[12], &alpha, 4);
  std::memcpy(k.push, &p, sizeof p);
  k.push_bytes = sizeof p;
  k.groups[0] = (n + 255) / 256;
  return k;
}

Buffer floats(const std::vector<float>& v) {
  Buffer b(v.size() * 4);
  b.copy_from_host(v.data(), b.nbytes());
  return b;
}

std::vector<float> read(const Buffer& b) {
  std::vector<float> out(b.nbytes() / 4);
  b.copy_to_host(out.data(), b.nbytes());
  return out;
}

TEST_P(TensorKernelTest, TheLibraryNamesItsKernels) {
  const std::vector<std::string> names = mpsrt::kernel_names();
  ASSERT_FALSE(names.empty());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(mpsrt::kernel_index(names[i]), int(i));
  EXPECT_GE(mpsrt::kernel_index("elementwise"), 0);
  EXPECT_EQ(mpsrt::kernel_index("no_such_kernel"), -1);
  EXPECT_EQ(mpsrt::kernel_index(""), -1);
}

TEST_P(TensorKernelTest, TheDeviceSaysWhetherItRunsKernels) {
  const bool cpu = props_.backend == "cpu";
  EXPECT_EQ(props_.kernel_arg_bytes == 0, cpu);
  if (cpu) {
    EXPECT_TRUE(props_.cpu_type);
  }
  if (props_.kernel_arg_bytes != 0) {
    EXPECT_GE(props_.kernel_arg_bytes, uint64_t(64) << 20);
  }
}

TEST_P(TensorKernelTest, LaunchesRunInStreamOrder) {
  const uint32_t n = 1000;
  std::vector<float> a(n), b(n);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = 0.5f * float(i);
    b[i] = 3.0f - float(i % 7);
  }
  Buffer da = floats(a), db = floats(b), sum(n * 4), prod(n * 4);
  const mpsrt::Stream s = mpsrt::current_stream();
  if (props_.kernel_arg_bytes == 0) {
    try {
      mpsrt::launch_kernel(elementwise(1, sum, da, db, n, 2.0f), s);
      FAIL() << "a device without tensor kernels launched one";
    } catch (const mpsrt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("runs no tensor kernels"), std::string::npos);
    }
    return;
  }
  // sum = a + 2 b; prod = sum * b (reads what the first launch wrote); sum = prod + sum
  // (writes what the second read).
  mpsrt::launch_kernel(elementwise(1, sum, da, db, n, 2.0f), s);
  mpsrt::launch_kernel(elementwise(3, prod, sum, db, n, 1.0f), s);
  mpsrt::launch_kernel(elementwise(1, sum, prod, sum, n, 1.0f), s);
  const std::vector<float> got = read(sum);
  for (uint32_t i = 0; i < n; ++i) {
    const float s1 = a[i] + 2.0f * b[i];
    ASSERT_FLOAT_EQ(got[i], s1 * b[i] + s1) << i;
  }
}

TEST_P(TensorKernelTest, ArgumentsMayStartAnywhereInTheirBuffer) {
  if (props_.kernel_arg_bytes == 0) return;  // the launch itself is refused (test above)
  // Views at offsets that are not a multiple of the binding alignment.
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  Buffer src = floats(v), dst(64 * 4);
  dst.fill(0, 4, mpsrt::current_stream());
  KernelLaunch k = elementwise(1, dst, src, src, 10, 1.0f);
  k.args[0].offset = 4 * 3;
  k.args[0].nbytes = 40;
  k.args[1].offset = 4 * 5;
  k.args[1].nbytes = 40;
  k.args[2].offset = 4 * 7;
  k.args[2].nbytes = 40;
  mpsrt::launch_kernel(k, mpsrt::current_stream());
  const std::vector<float> got = read(dst);
  for (int i = 0; i < 64; ++i) {
    const float want = i >= 3 && i < 13 ? float(i - 3 + 5) + float(i - 3 + 7) : 0.0f;
    ASSERT_EQ(got[i], want) << i;
  }
}

// A refused launch says what was wrong and encodes nothing: the stream still works.
TEST_P(TensorKernelTest, BadLaunchesAreRefused) {
  Buffer a(64), b(64);
  mpsrt::Stream s = mpsrt::current_stream();
  auto refused = [&](KernelLaunch k, const char* says) {
    try {
      mpsrt::launch_kernel(k, s);
      ADD_FAILURE() << "accepted a launch that should say: " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const KernelLaunch good = elementwise(1, a, b, b, 16, 1.0f);
  KernelLaunch k = good;
  k.kernel = 100000;
  refused(k, "no such kernel");
  k = good;
  k.nargs = 9;
  refused(k, "at most 8 arguments");
  k = good;
  k.groups[1] = 0;
  refused(k, "each must be from 1 to 65535");
  k = good;
  k.groups[0] = 70000;
  refused(k, "each must be from 1 to 65535");
  if (props_.kernel_arg_bytes != 0) {
    k = good;
    k.args[1].offset = 60;
    k.args[1].nbytes = 8;
    refused(k, "inside the Buffer");
    k = good;
    k.args[2].nbytes = 0;
    refused(k, "non-empty range");
    k = good;
    k.args[1].buffer = nullptr;
    refused(k, "has no Buffer");
  }
  // Nothing was encoded: the stream completes, the Buffers keep their bytes.
  a.fill(0x3f800000, 4, s);
  s.synchronize();
  EXPECT_EQ(read(a), std::vector<float>(16, 1.0f));
}

std::vector<std::string> params() {
  std::vector<std::string> out = mpsrt::available_backends();
  if (std::find(out.begin(), out.end(), "vulkan") != out.end()) out.push_back("vulkan_discrete");
  return out;
}

INSTANTIATE_TEST_SUITE_P(KernelsOn, TensorKernelTest, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
