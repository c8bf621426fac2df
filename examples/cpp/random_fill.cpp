// Random numbers into device memory from C++, and what a wrong call does: every public call
// checks its arguments and throws std::invalid_argument before anything is encoded, so a
// count past the end of a Buffer never writes into its neighbours. Exits non-zero on any
// failure (a bad call that is accepted, a neighbouring byte that changed).
#include <mpsrt/mpsrt.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Spec = mpsrt::RandomSpec;

// Host bytes of a buffer (the cpu and vulkan backends' memory is host-visible).
std::vector<uint8_t> bytes_of(const mpsrt::Buffer& b) {
  mpsrt::synchronize(b.device());
  const auto* p = static_cast<const uint8_t*>(b.host_ptr());
  return p == nullptr ? std::vector<uint8_t>() : std::vector<uint8_t>(p, p + b.nbytes());
}

bool rejected(const char* what, const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    std::printf("  %-34s -> std::invalid_argument: %s\n", what, e.what());
    return true;
  }
  std::fprintf(stderr, "error: %s was accepted\n", what);
  return false;
}

}  // namespace

int main() {
  try {
    std::printf("mpsrt %s on %s (%s)\n", mpsrt::version(), mpsrt::backend_name().c_str(),
                mpsrt::backend_reason().c_str());
    mpsrt::Stream stream = mpsrt::current_stream();
    mpsrt::Generator gen = mpsrt::Generator::default_generator();
    gen.manual_seed(42);

    // Three neighbours from the same heap; the middle one gets the random numbers.
    const size_t n = 256;
    mpsrt::Buffer left(n * sizeof(float), stream), mid(n * sizeof(float), stream),
        right(n * sizeof(float), stream);
    left.fill(0xA5, 1, stream);
    right.fill(0x5A, 1, stream);
    Spec uniform;
    uniform.op = Spec::Op::Uniform;
    uniform.dtype = Spec::DType::F32;
    mpsrt::random_fill(mid, n, uniform, gen, stream);
    const std::vector<uint8_t> m = bytes_of(mid);
    if (!m.empty()) {
      const auto* f = reinterpret_cast<const float*>(m.data());
      std::printf("uniform float32: %.6f %.6f %.6f %.6f ...\n", f[0], f[1], f[2], f[3]);
    }
    const std::vector<uint8_t> l0 = bytes_of(left), r0 = bytes_of(right);

    std::printf("wrong calls:\n");
    bool ok = true;
    ok &= rejected("count past the end",
                   [&] { mpsrt::random_fill(mid, n + 1, uniform, gen, stream); });
    ok &= rejected("normal into uint8", [&] {
      Spec s;
      s.op = Spec::Op::Normal;
      s.dtype = Spec::DType::U8;
      mpsrt::random_fill(mid, 1, s, gen, stream);
    });
    ok &= rejected("op out of range", [&] {
      Spec s;
      s.op = static_cast<Spec::Op>(200);
      mpsrt::random_fill(mid, 1, s, gen, stream);
    });
    ok &= rejected("bernoulli with p = 2", [&] {
      Spec s;
      s.op = Spec::Op::Bernoulli;
      s.dtype = Spec::DType::F32;
      s.p = 2.0;
      mpsrt::random_fill(mid, 1, s, gen, stream);
    });
    ok &= rejected("fill with a 3-byte pattern", [&] { mid.fill(0, 3, stream); });
    ok &= rejected("copy_from_host of the wrong size", [&] {
      std::vector<uint8_t> host(mid.nbytes() + 1);
      mid.copy_from_host(host.data(), host.size());
    });
    if (bytes_of(left) != l0 || bytes_of(right) != r0) {
      std::fprintf(stderr, "error: a neighbouring buffer changed\n");
      ok = false;
    } else {
      std::printf("neighbouring buffers untouched\n");
    }
    // The runtime is still usable after the rejected calls.
    mpsrt::random_fill(mid, n, uniform, gen, stream);
    mpsrt::synchronize();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
