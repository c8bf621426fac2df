// AVX-512 kernels (compiled with -mavx512f/bw/vl; used only when the CPU reports them).
#include <immintrin.h>

#include "backends/cpu/kernels_impl.h"

namespace mpsrt::cpu {
namespace {
struct Avx512Vec {
  static constexpr size_t kWidth = 64;
  static constexpr bool kHasStream = true;
  using reg = __m512i;
  static reg broadcast(uint64_t p) { return _mm512_set1_epi64(static_cast<long long>(p)); }
  static void store(void* d, reg r) { _mm512_store_si512(d, r); }
  static void stream(void* d, reg r) { _mm512_stream_si512(static_cast<reg*>(d), r); }
  static reg loadu(const void* s) { return _mm512_loadu_si512(s); }
  static void fence() { _mm_sfence(); }
};
}  // namespace

const Kernels kAvx512Kernels = make_kernels<Avx512Vec>(Isa::Avx512, &random_avx512);

}  // namespace mpsrt::cpu
