// Portable kernels: 8-byte words, no streaming stores. The fallback on every CPU.
#include <cstring>

#include "backends/cpu/kernels_impl.h"

namespace mpsrt::cpu {
namespace {
struct ScalarVec {
  static constexpr size_t kWidth = 8;
  static constexpr bool kHasStream = false;
  using reg = uint64_t;
  static reg broadcast(uint64_t p) { return p; }
  static void store(void* d, reg r) { std::memcpy(d, &r, 8); }
  static void stream(void* d, reg r) { std::memcpy(d, &r, 8); }
  static reg loadu(const void* s) {
    reg r;
    std::memcpy(&r, s, 8);
    return r;
  }
  static void fence() {}
};
}  // namespace

const Kernels kScalarKernels = make_kernels<ScalarVec>(Isa::Scalar, &random_scalar);

}  // namespace mpsrt::cpu
