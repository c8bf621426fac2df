// Host test of the arithmetic in csrc/backends/metal/kernels.metal (run by .ci/metal_check.sh):
// a few Metal Shading Language names are defined for C++ here, the kernel file is included,
// and its software binary64 multiply / add / conversions must equal the host's IEEE results
// bit for bit; its float-float log, sin and cos, rounded to float, must equal the correctly
// rounded (double-evaluated) values; Box-Muller float64 must agree to 1e-13 of the radius.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
typedef uint32_t uint;
typedef uint64_t ulong;
typedef unsigned char uchar;
#define kernel
#define device
#define thread
#define constant const
template <class T, class F>
T as_type(F f) {
  static_assert(sizeof(T) == sizeof(F), "");
  T t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
inline uint mulhi(uint a, uint b) {
  return uint((uint64_t(a) * b) >> 32);
}
inline ulong mulhi(ulong a, ulong b) {
  return ulong((unsigned __int128)a * b >> 64);
}
inline ulong clz(ulong x) {
  return x ? __builtin_clzll(x) : 64;
}
inline float fma(float a, float b, float c) {
  return std::fmaf(a, b, c);
}
inline float rint(float x) {
  return std::rintf(x);
}
inline float sqrt(float x) {
  return std::sqrt(x);
}
inline float frexp(float x, int& e) {
  return std::frexp(x, &e);
}
using std::max;
using std::min;
struct uint2 {
  uint x, y;
  uint2(uint a, uint b) : x(a), y(b) {}
  uint2& operator+=(uint2 o) {
    x += o.x;
    y += o.y;
    return *this;
  }
};
struct uint4 {
  uint x, y, z, w;
  uint4(uint a, uint b, uint c, uint d) : x(a), y(b), z(c), w(d) {}
  uint operator[](uint i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};
enum memory_order { memory_order_relaxed };
struct atomic_uint {
  uint v;
};
inline void atomic_store_explicit(atomic_uint* p, uint v, memory_order) {
  p->v = v;
}
inline void atomic_fetch_and_explicit(atomic_uint* p, uint v, memory_order) {
  p->v &= v;
}
inline void atomic_fetch_or_explicit(atomic_uint* p, uint v, memory_order) {
  p->v |= v;
}

#define MPSRT_KERNELS_HOST_TEST 1
#include "kernels_math.inc"

namespace {
double to_d(ulong b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
ulong to_b(double d) {
  ulong b;
  std::memcpy(&b, &d, 8);
  return b;
}
}  // namespace

int main() {
  std::mt19937_64 g(1);
  long bad = 0;
  auto report = [&](const char* what, double x, double y) {
    if (bad++ < 5) std::printf("kernels_math: %s mismatch at %a, %a\n", what, x, y);
  };
  auto random_double = [&]() {
    ulong b = g();
    const int kind = static_cast<int>(g() % 8);
    if (kind == 0) b &= 0x800fffffffffffffull;  // subnormal
    if (kind == 1) b = (b & 0x800fffffffffffffull) | (ulong(1000 + g() % 48) << 52);
    return b;
  };
  for (int i = 0; i < 2000000; ++i) {
    const ulong a = random_double();
    ulong b = random_double();
    if (i % 3 == 0) b = (b & 0xfff0000000000000ull) | (a & 0x000fffffffffffffull);
    const double x = to_d(a), y = to_d(b);
    if (std::isnan(x) || std::isnan(y)) continue;
    const ulong m = d_mul(a, b), s = d_add(a, b);
    if (!(std::isnan(x * y) && d_isnan(m)) && m != to_b(x * y)) report("mul", x, y);
    if (!(std::isnan(x + y) && d_isnan(s)) && s != to_b(x + y)) report("add", x, y);
  }
  // Every small integer, zero and the ends of the float64 range IntRange may write.
  for (int64_t k = -5000; k <= 5000; ++k) {
    if (d_from_i64(static_cast<ulong>(k)) != to_b(static_cast<double>(k))) report("i64", k, 0);
  }
  for (int64_t k : {int64_t(1) << 53, -(int64_t(1) << 53), (int64_t(1) << 53) - 1}) {
    if (d_from_i64(static_cast<ulong>(k)) != to_b(static_cast<double>(k))) report("i64", k, 0);
  }
  std::mt19937 g32(2);
  for (int i = 0; i < 1000000; ++i) {
    const uint w = g32();
    float f;
    std::memcpy(&f, &w, 4);
    if (!std::isnan(f) && d_from_f32(f) != to_b(static_cast<double>(f))) report("f32->f64", f, 0);
    const ulong u = g() >> 11;
    if (d_from_u64(u, 53) != to_b(static_cast<double>(u) * 1.1102230246251565e-16)) {
      report("u53", static_cast<double>(u), 0);
    }
    // IntRange into float64: integers of [-2^53, 2^53], exactly.
    const auto iv = static_cast<int64_t>(g() % ((ulong(1) << 54) + 1)) - (int64_t(1) << 53);
    if (d_from_i64(static_cast<ulong>(iv)) != to_b(static_cast<double>(iv))) {
      report("i64->f64", static_cast<double>(iv), 0);
    }
    const float u1 = static_cast<float>((w >> 8) + 1u) * 5.9604644775390625e-08f;
    if (ff_log(u1).hi != static_cast<float>(std::log(static_cast<double>(u1))))
      report("log", u1, 0);
    const float th = static_cast<float>(g32() >> 8) * 5.9604644775390625e-08f * 6.2831855f;
    ff s, c;
    ff_sincos(ff_make(th, 0.0f), s, c);
    if (s.hi != static_cast<float>(std::sin(static_cast<double>(th))) ||
        c.hi != static_cast<float>(std::cos(static_cast<double>(th)))) {
      report("sincos", th, 0);
    }
    ulong z0, z1;
    const uint w1 = g32();
    box_muller_f64(w, w1, z0, z1);
    const double du1 = static_cast<double>((w >> 8) + 1u) * 5.9604644775390625e-08;
    const double du2 = static_cast<double>(w1 >> 8) * 5.9604644775390625e-08;
    const double r = std::sqrt(-2.0 * std::log(du1)), t = 6.28318530717958647692 * du2;
    if (std::fabs(to_d(z0) - r * std::cos(t)) > 1e-13 * (r + 1e-300) ||
        std::fabs(to_d(z1) - r * std::sin(t)) > 1e-13 * (r + 1e-300)) {
      report("box_muller_f64", du1, du2);
    }
  }
  if (bad != 0) std::printf("kernels_math: %ld mismatches\n", bad);
  return bad != 0;
}
