// AVX2 kernels (compiled with -mavx2; used only when the CPU reports AVX2).
#include <immintrin.h>

#include "backends/cpu/kernels_impl.h"

namespace mpsrt::cpu {
namespace {
struct Avx2Vec {
  static constexpr size_t kWidth = 32;
  static constexpr bool kHasStream = true;
  using reg = __m256i;
  static reg broadcast(uint64_t p) { return _mm256_set1_epi64x(static_cast<long long>(p)); }
  static void store(void* d, reg r) { _mm256_store_si256(static_cast<reg*>(d), r); }
  static void stream(void* d, reg r) { _mm256_stream_si256(static_cast<reg*>(d), r); }
  static reg loadu(const void* s) { return _mm256_loadu_si256(static_cast<const reg*>(s)); }
  static void fence() { _mm_sfence(); }
};
}  // namespace

const Kernels kAvx2Kernels = make_kernels<Avx2Vec>(Isa::Avx2, &random_avx2);

}  // namespace mpsrt::cpu
