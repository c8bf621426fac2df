// Tests of the cpu backend's random-number kernels (SimdOps::random, backends/cpu/random_*.cpp)
// against mpsrt/philox.h: Random123's known answers for the Philox reference, the scalar table
// against an independent restatement of the stream definition and transforms, and every other
// supported table against the scalar one, bit for bit (normal too), over
// many counts, first elements, destination alignments, split calls, counters that carry into
// the second counter word and large seeds. The guard bytes around each written range are
// checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/simd_ops.h"
#include "mpsrt/philox.h"

namespace {

namespace philox = mpsrt::philox;
using mpsrt::backend::RandomDType;
using mpsrt::backend::RandomOp;
using mpsrt::backend::RandomParams;
using mpsrt::cpu::Isa;

constexpr uint8_t kGuard = 0xCC;
constexpr size_t kGuardBytes = 64;
constexpr uint64_t kLargeCount = (uint64_t(1) << 20) + 3;
constexpr uint64_t kFirsts[] = {0, 1, 5, 64};
constexpr uint64_t kMaxFirst = 64;
constexpr uint64_t kMaxMis = 15;  // destination shifts in elements (the 64-byte phase varies)

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (mpsrt::cpu::isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

constexpr auto elem_size = mpsrt::dtype_size;

std::string describe(const RandomParams& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s/%s seed=0x%llx offset=0x%llx a=%g b=%g low=%lld range=0x%llx threshold=0x%llx",
                mpsrt::random_op_name(p.op), mpsrt::dtype_info(p.dtype).name,
                static_cast<unsigned long long>(p.seed), static_cast<unsigned long long>(p.offset),
                p.a, p.b, static_cast<long long>(p.low), static_cast<unsigned long long>(p.range),
                static_cast<unsigned long long>(p.threshold));
  return buf;
}

// ---------------------------------------------------------------- an independent restatement

float f32_from_bits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint32_t f32_to_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

// binary16 -> float (exact).
float f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else if (e == 31) {
    v = m ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<double>(m | 0x400), e - 25);
  }
  return static_cast<float>((h & 0x8000) ? -v : v);
}
float bf16_value(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even by search over the ordered positive codes [0, inf_code] of a 16-bit
// format: a different method from the kernels' bit manipulation.
uint16_t round_by_search(float f, float (*value)(uint16_t), uint16_t inf_code) {
  if (std::isnan(f)) {  // quiet, sign and top payload bits kept (as x86's conversions)
    const uint32_t x = f32_to_bits(f);
    return inf_code == 0x7c00
               ? static_cast<uint16_t>(((x >> 16) & 0x8000) | 0x7e00 | ((x >> 13) & 0x3ff))
               : static_cast<uint16_t>((x >> 16) | 0x40);
  }
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  // Largest code c with value(c) <= a.
  uint32_t lo = 0, hi = inf_code;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (static_cast<double>(value(static_cast<uint16_t>(mid))) <= a) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  uint32_t c = lo;
  if (c < inf_code) {
    const double below = value(static_cast<uint16_t>(c));
    double above = value(static_cast<uint16_t>(c + 1));
    if (c + 1 == inf_code) {  // the rounding boundary past the largest finite value
      above = 2 * below - static_cast<double>(value(static_cast<uint16_t>(c - 1)));
    }
    const double d0 = a - below, d1 = above - a;
    if (d1 < d0 || (d1 == d0 && (c & 1))) ++c;
  }
  return static_cast<uint16_t>(sign | c);
}
uint16_t ref_f16(float f) {
  return round_by_search(f, f16_value, 0x7c00);
}
uint16_t ref_bf16(float f) {
  return round_by_search(f, bf16_value, 0x7f80);
}

// Words of an op, one Philox block per four words.
class SpecWords {
 public:
  SpecWords(uint64_t seed, uint64_t offset) : seed_(seed), offset_(offset) {}
  uint32_t operator()(uint64_t j) {
    if (!valid_ || j / 4 != cached_) {
      cached_ = j / 4;
      block_ = philox::block(seed_, offset_ + cached_);
      valid_ = true;
    }
    return block_.w[j % 4];
  }

 private:
  uint64_t seed_, offset_;
  uint64_t cached_ = 0;
  bool valid_ = false;
  philox::Words block_{};
};

// Element e's bytes (non-normal ops), widened to 64 bits.
uint64_t spec_element(const RandomParams& p, SpecWords& w, uint64_t e) {
  switch (p.op) {
    case RandomOp::Bits:
      return w(e);
    case RandomOp::Uniform: {
      const float lo = static_cast<float>(p.a), hi = static_cast<float>(p.b);
      const float span = hi - lo;
      switch (p.dtype) {
        case RandomDType::F32: {
          volatile float t = span * philox::uniform_f32(w(e));  // no contraction
          return f32_to_bits(lo + t);
        }
        case RandomDType::F16: {
          volatile float t = span * philox::uniform_f16_value(w(e));
          return ref_f16(lo + t);
        }
        case RandomDType::BF16: {
          volatile float t = span * philox::uniform_bf16_value(w(e));
          return ref_bf16(lo + t);
        }
        case RandomDType::F64: {
          volatile double t = (p.b - p.a) * philox::uniform_f64(w(2 * e), w(2 * e + 1));
          const double v = p.a + t;
          uint64_t x;
          std::memcpy(&x, &v, 8);
          return x;
        }
        default:
          break;
      }
      break;
    }
    case RandomOp::IntRange: {
      const uint64_t r = p.range <= (uint64_t(1) << 32)
                             ? w(e) % p.range
                             : ((static_cast<uint64_t>(w(2 * e + 1)) << 32) | w(2 * e)) % p.range;
      const uint64_t v = static_cast<uint64_t>(p.low) + r;
      // The integer low + r written as the dtype: floats hold it exactly (|v| <= 2^digits).
      const auto iv = static_cast<int64_t>(v);
      switch (p.dtype) {
        case RandomDType::Bool:
          return v != 0 ? 1 : 0;
        case RandomDType::F16:
          return ref_f16(static_cast<float>(iv));
        case RandomDType::BF16:
          return ref_bf16(static_cast<float>(iv));
        case RandomDType::F32:
          return f32_to_bits(static_cast<float>(iv));
        case RandomDType::F64: {
          const double d = static_cast<double>(iv);
          uint64_t x;
          std::memcpy(&x, &d, 8);
          return x;
        }
        default:
          break;
      }
      const size_t s = elem_size(p.dtype);
      return s == 8 ? v : v & ((uint64_t(1) << (8 * s)) - 1);
    }
    case RandomOp::Bernoulli: {
      const bool one = w(e) < p.threshold;
      switch (p.dtype) {
        case RandomDType::F16:
          return one ? 0x3c00 : 0;
        case RandomDType::BF16:
          return one ? 0x3f80 : 0;
        case RandomDType::F32:
          return one ? f32_to_bits(1.0f) : 0;
        case RandomDType::F64:
          return one ? 0x3ff0000000000000ULL : 0;
        default:
          return one ? 1 : 0;
      }
    }
    case RandomOp::Normal:
      break;
  }
  ADD_FAILURE() << "no spec for " << describe(p);
  return 0;
}

// Element e of a normal op, in double precision.
double spec_normal(const RandomParams& p, SpecWords& w, uint64_t e) {
  const uint64_t q = e / 2;
  const double u1 = static_cast<double>((w(2 * q) >> 8) + 1) * 0x1p-24;
  const double u2 = static_cast<double>(w(2 * q + 1) >> 8) * 0x1p-24;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double t = 2.0 * M_PI * u2;
  return p.a + p.b * (e % 2 == 0 ? r * std::cos(t) : r * std::sin(t));
}

uint64_t load_elem(const uint8_t* p, size_t s) {
  uint64_t x = 0;
  std::memcpy(&x, p, s);  // little-endian
  return x;
}

double elem_value(RandomDType d, uint64_t bits) {
  switch (d) {
    case RandomDType::F16:
      return f16_value(static_cast<uint16_t>(bits));
    case RandomDType::BF16:
      return bf16_value(static_cast<uint16_t>(bits));
    case RandomDType::F32:
      return f32_from_bits(static_cast<uint32_t>(bits));
    case RandomDType::F64: {
      double v;
      std::memcpy(&v, &bits, 8);
      return v;
    }
    default:
      return static_cast<double>(bits);
  }
}

// Distance in units in the last place between two floats of the same sign.
int64_t ordered(int64_t x, int bits) {
  const int64_t sign = int64_t(1) << (bits - 1);
  return (x & sign) ? -(x & (sign - 1)) : x;
}
int64_t ulp_distance(RandomDType d, uint64_t a, uint64_t b) {
  switch (d) {
    case RandomDType::F16:
    case RandomDType::BF16:
      return std::llabs(ordered(static_cast<int64_t>(a), 16) -
                        ordered(static_cast<int64_t>(b), 16));
    case RandomDType::F32:
      return std::llabs(ordered(static_cast<int64_t>(a), 32) -
                        ordered(static_cast<int64_t>(b), 32));
    default: {  // f64: measured in float32 ulps of the value
      const double x = elem_value(d, a), y = elem_value(d, b);
      const double ulp = std::max(std::ldexp(std::fabs(x), -23), 0x1p-149);
      return static_cast<int64_t>(std::ceil(std::fabs(x - y) / ulp));
    }
  }
}

// ---------------------------------------------------------------- the cases

std::vector<RandomParams> all_cases() {
  struct Key {
    uint64_t seed, offset;
  };
  const Key keys[] = {
      {0x0123456789abcdefULL, (uint64_t(1) << 32) - 3},  // the block counter carries
      {42, 7},
      {0xffffffffffffffffULL, 0},
      {0xdeadbeefcafebabeULL, 0xfffffffffffffffdULL},  // the counter wraps past 2^64
  };
  std::vector<RandomParams> out;
  size_t next = 0;
  auto add = [&](RandomOp op, RandomDType dt, auto tweak) {
    for (int rep = 0; rep < 2; ++rep) {  // each configuration under two keys
      RandomParams p;
      p.op = op;
      p.dtype = dt;
      p.seed = keys[next % 4].seed;
      p.offset = keys[next % 4].offset;
      ++next;
      tweak(p);
      out.push_back(p);
    }
  };
  auto none = [](RandomParams&) {};
  auto ab = [](double a, double b) {
    return [a, b](RandomParams& p) {
      p.a = a;
      p.b = b;
    };
  };
  add(RandomOp::Bits, RandomDType::U32, none);
  for (RandomDType dt : {RandomDType::F32, RandomDType::F16, RandomDType::BF16, RandomDType::F64}) {
    add(RandomOp::Uniform, dt, ab(0, 1));
    add(RandomOp::Uniform, dt, ab(-2.5, 3.75));
  }
  add(RandomOp::Uniform, RandomDType::F32, ab(1e-40, 3e-38));      // subnormal results
  add(RandomOp::Uniform, RandomDType::F16, ab(-1e-5, 1e-5));       // subnormal halves
  add(RandomOp::Uniform, RandomDType::F16, ab(-3, 70000));         // overflow to infinity
  add(RandomOp::Uniform, RandomDType::BF16, ab(1000.5, 1001.25));  // rounding ties
  add(RandomOp::Uniform, RandomDType::F16, ab(-INFINITY, 1));      // NaN
  add(RandomOp::Uniform, RandomDType::BF16, ab(-INFINITY, 1));     // NaN
  for (RandomDType dt : {RandomDType::F32, RandomDType::F16, RandomDType::BF16, RandomDType::F64}) {
    add(RandomOp::Normal, dt, ab(0, 1));
    add(RandomOp::Normal, dt, ab(3, 0.5));
  }
  auto ir = [](int64_t low, uint64_t range) {
    return [low, range](RandomParams& p) {
      p.low = low;
      p.range = range;
    };
  };
  add(RandomOp::IntRange, RandomDType::U8, ir(0, 256));
  add(RandomOp::IntRange, RandomDType::U8, ir(-3, 10));
  add(RandomOp::IntRange, RandomDType::I32, ir(-100, 1000));
  add(RandomOp::IntRange, RandomDType::I32, ir(INT32_MIN, uint64_t(1) << 32));
  add(RandomOp::IntRange, RandomDType::I64, ir(-5, 7));
  add(RandomOp::IntRange, RandomDType::I64, ir(-5, (uint64_t(1) << 32) + 1));  // two words
  add(RandomOp::IntRange, RandomDType::I64, ir(INT64_MIN, ~uint64_t(0)));
  add(RandomOp::IntRange, RandomDType::I32, ir(7, uint64_t(3) << 40));  // two words, wraps
  // torch's random_ on every dtype: the default ranges ([0, 2^digits] for floats, [0, max]
  // for integers, [0, 2) for bool) and signed ranges; float64's default takes two words.
  add(RandomOp::IntRange, RandomDType::I8, ir(0, 128));
  add(RandomOp::IntRange, RandomDType::I8, ir(-128, 256));
  add(RandomOp::IntRange, RandomDType::I16, ir(0, 32768));
  add(RandomOp::IntRange, RandomDType::I16, ir(-300, 601));
  add(RandomOp::IntRange, RandomDType::U16, ir(0, 65536));
  add(RandomOp::IntRange, RandomDType::U32, ir(0, uint64_t(1) << 32));
  add(RandomOp::IntRange, RandomDType::U32, ir(5, (uint64_t(1) << 32) - 5));
  add(RandomOp::IntRange, RandomDType::U64, ir(0, uint64_t(1) << 63));  // two words
  add(RandomOp::IntRange, RandomDType::Bool, ir(0, 2));
  add(RandomOp::IntRange, RandomDType::Bool, ir(1, 1));
  add(RandomOp::IntRange, RandomDType::F16, ir(0, 2049));
  add(RandomOp::IntRange, RandomDType::F16, ir(-2048, 4097));
  add(RandomOp::IntRange, RandomDType::BF16, ir(0, 257));
  add(RandomOp::IntRange, RandomDType::BF16, ir(-256, 513));
  add(RandomOp::IntRange, RandomDType::F32, ir(0, (uint64_t(1) << 24) + 1));
  add(RandomOp::IntRange, RandomDType::F32, ir(-(int64_t(1) << 24), (uint64_t(1) << 25) + 1));
  add(RandomOp::IntRange, RandomDType::F32, ir(-7, 20));
  add(RandomOp::IntRange, RandomDType::F64, ir(0, (uint64_t(1) << 53) + 1));  // two words
  add(RandomOp::IntRange, RandomDType::F64, ir(-(int64_t(1) << 53), (uint64_t(1) << 54) + 1));
  add(RandomOp::IntRange, RandomDType::F64, ir(-1000, 3000));
  for (RandomDType dt :
       {RandomDType::U8, RandomDType::Bool, RandomDType::F16, RandomDType::BF16, RandomDType::F32,
        RandomDType::F64, RandomDType::I32, RandomDType::I64, RandomDType::I8, RandomDType::I16}) {
    add(RandomOp::Bernoulli, dt,
        [](RandomParams& p) { p.threshold = philox::bernoulli_threshold(0.3); });
  }
  add(RandomOp::Bernoulli, RandomDType::F32,
      [](RandomParams& p) { p.threshold = philox::bernoulli_threshold(1.0); });
  add(RandomOp::Bernoulli, RandomDType::U8,
      [](RandomParams& p) { p.threshold = philox::bernoulli_threshold(0.0); });
  return out;
}

std::vector<RandomParams> cases_of(RandomOp op) {
  std::vector<RandomParams> out;
  for (const RandomParams& p : all_cases()) {
    if (p.op == op) out.push_back(p);
  }
  return out;
}

// ---------------------------------------------------------------- running a table

// A guarded destination: element 0 at a 64-byte boundary plus mis elements.
class Dest {
 public:
  Dest(size_t elems, size_t esize)
      : esize_(esize), storage_(elems * esize + 2 * kGuardBytes + 128) {}
  // Fills everything with the guard byte and returns element 0 for a shift of mis elements.
  uint8_t* reset(size_t mis) {
    std::memset(storage_.data(), kGuard, storage_.size());
    const auto addr = reinterpret_cast<uintptr_t>(storage_.data()) + kGuardBytes;
    const size_t pad = (64 - addr % 64) % 64;
    return storage_.data() + kGuardBytes + pad + mis * esize_;
  }
  size_t esize() const { return esize_; }
  const std::vector<uint8_t>& storage() const { return storage_; }

 private:
  size_t esize_;
  std::vector<uint8_t> storage_;
};

// Checks that every byte of the storage outside [e0, e0 + n) elements is still the guard.
::testing::AssertionResult guards_intact(const Dest& d, const uint8_t* e0, size_t n) {
  const uint8_t* base = d.storage().data();
  const size_t lo = static_cast<size_t>(e0 - base);
  const size_t hi = lo + n * d.esize();
  for (size_t i = 0; i < d.storage().size(); ++i) {
    if ((i < lo || i >= hi) && base[i] != kGuard) {
      return ::testing::AssertionFailure()
             << "byte " << static_cast<ptrdiff_t>(i) - static_cast<ptrdiff_t>(lo)
             << " relative to the first written element was overwritten (n=" << n << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Compares n elements at got with want (both element arrays of the op's dtype).
::testing::AssertionResult same_elements(const RandomParams& p, const uint8_t* got,
                                         const uint8_t* want, uint64_t n, uint64_t first) {
  const size_t s = elem_size(p.dtype);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t a = load_elem(got + i * s, s), b = load_elem(want + i * s, s);
    if (a == b) continue;
    return ::testing::AssertionFailure()
           << "element " << first + i << " is 0x" << std::hex << a << " (" << elem_value(p.dtype, a)
           << "), want 0x" << b << " (" << elem_value(p.dtype, b) << ")" << std::dec;
  }
  return ::testing::AssertionSuccess();
}

// The scalar table's elements [0, count).
std::vector<uint8_t> scalar_fill(const RandomParams& p, uint64_t count) {
  std::vector<uint8_t> out(count * elem_size(p.dtype) + 8);
  mpsrt::cpu::simd_ops_for(Isa::Scalar).random(out.data(), p, 0, count);
  return out;
}

// ---------------------------------------------------------------- Philox itself

TEST(RandomKernelPhilox, Random123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const philox::Words w = philox::philox4x32_10(k.ctr, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(w.w[i], k.out[i]) << "word " << i;
  }
  // block(): key = (seed lo, seed hi), counter = (block lo, block hi, 0, 0).
  const philox::Words z = philox::block(0, 0);
  EXPECT_EQ(z.w[0], 0x6627e8d5u);
  EXPECT_EQ(z.w[3], 0x9b00dbd8u);
}

TEST(RandomKernelPhilox, StreamDefinition) {
  const uint64_t seed = 0xa4093822299f31d0ULL;
  const uint64_t block = 0x85a308d3243f6a88ULL;
  const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0, 0};
  const uint32_t key[2] = {0x299f31d0, 0xa4093822};
  const philox::Words a = philox::philox4x32_10(ctr, key);
  const philox::Words b = philox::block(seed, block);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.w[i], b.w[i]);
  for (uint64_t j = 0; j < 12; ++j) {
    EXPECT_EQ(philox::word(seed, block - 1, j), philox::block(seed, block - 1 + j / 4).w[j % 4]);
  }
  // The low counter word carries into the next one.
  const uint32_t carry_ctr[4] = {0, 1, 0, 0};
  const philox::Words c = philox::philox4x32_10(carry_ctr, key);
  EXPECT_EQ(philox::word(seed, (uint64_t(1) << 32) - 1, 4), c.w[0]);
  EXPECT_EQ(philox::blocks_for_words(0), 0u);
  EXPECT_EQ(philox::blocks_for_words(1), 1u);
  EXPECT_EQ(philox::blocks_for_words(4), 1u);
  EXPECT_EQ(philox::blocks_for_words(5), 2u);
}

TEST(RandomKernelPhilox, WordsPerOp) {
  RandomParams p;
  p.count = 5;
  p.op = RandomOp::Uniform;
  p.dtype = RandomDType::F32;
  EXPECT_EQ(mpsrt::backend::random_words(p), 5u);
  p.dtype = RandomDType::F64;
  EXPECT_EQ(mpsrt::backend::random_words(p), 10u);
  p.op = RandomOp::Normal;
  EXPECT_EQ(mpsrt::backend::random_words(p), 6u);
  p.op = RandomOp::IntRange;
  p.dtype = RandomDType::I64;
  p.range = uint64_t(1) << 32;
  EXPECT_EQ(mpsrt::backend::random_words(p), 5u);
  p.range = (uint64_t(1) << 32) + 1;
  EXPECT_EQ(mpsrt::backend::random_words(p), 10u);
}

TEST(RandomKernelPhilox, HalfRoundingReference) {
  // The test's own float -> half / bfloat16 rounding, on values with known answers.
  EXPECT_EQ(ref_f16(1.0f), 0x3c00);
  EXPECT_EQ(ref_f16(-2.0f), 0xc000);
  EXPECT_EQ(ref_f16(65504.0f), 0x7bff);
  EXPECT_EQ(ref_f16(65519.99f), 0x7bff);
  EXPECT_EQ(ref_f16(65520.0f), 0x7c00);
  EXPECT_EQ(ref_f16(1.0f + 0x1p-11f), 0x3c00);      // tie to even
  EXPECT_EQ(ref_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie to even
  EXPECT_EQ(ref_f16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(ref_f16(0x1p-25f), 0x0000);             // tie to even (zero)
  EXPECT_EQ(ref_f16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(ref_f16(-0.0f), 0x8000);
  EXPECT_EQ(ref_bf16(1.0f), 0x3f80);
  EXPECT_EQ(ref_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie to even
  EXPECT_EQ(ref_bf16(f32_from_bits(0x3f818000)), 0x3f82);
  EXPECT_EQ(ref_bf16(f32_from_bits(0x3f808001)), 0x3f81);
}

TEST(RandomKernelPhilox, SupportedCombinations) {
  using mpsrt::cpu::random_supported;
  EXPECT_TRUE(random_supported(RandomOp::Bits, RandomDType::U32));
  EXPECT_FALSE(random_supported(RandomOp::Bits, RandomDType::F32));
  EXPECT_TRUE(random_supported(RandomOp::Uniform, RandomDType::BF16));
  EXPECT_FALSE(random_supported(RandomOp::Uniform, RandomDType::I32));
  EXPECT_TRUE(random_supported(RandomOp::Normal, RandomDType::F64));
  EXPECT_TRUE(random_supported(RandomOp::IntRange, RandomDType::I64));
  EXPECT_TRUE(random_supported(RandomOp::Bernoulli, RandomDType::Bool));
  // torch's rules: random_ / randint on every dtype; bernoulli_ on all but uint16/32/64.
  for (RandomDType dt :
       {RandomDType::U8, RandomDType::I32, RandomDType::I64, RandomDType::U32, RandomDType::F16,
        RandomDType::BF16, RandomDType::F32, RandomDType::F64, RandomDType::Bool, RandomDType::I8,
        RandomDType::I16, RandomDType::U16, RandomDType::U64}) {
    EXPECT_TRUE(random_supported(RandomOp::IntRange, dt)) << mpsrt::dtype_info(dt).name;
    const bool wide_unsigned =
        dt == RandomDType::U16 || dt == RandomDType::U32 || dt == RandomDType::U64;
    EXPECT_EQ(random_supported(RandomOp::Bernoulli, dt), !wide_unsigned)
        << mpsrt::dtype_info(dt).name;
  }
  EXPECT_FALSE(random_supported(RandomOp::Uniform, RandomDType::I8));
  EXPECT_FALSE(random_supported(RandomOp::Normal, RandomDType::U64));
  EXPECT_FALSE(random_supported(RandomOp::Bits, RandomDType::U64));
  EXPECT_FALSE(random_supported(RandomOp::IntRange, static_cast<RandomDType>(13)));
  for (const RandomParams& p : all_cases()) {
    EXPECT_TRUE(random_supported(p.op, p.dtype)) << describe(p);
  }
}

// ---------------------------------------------------------------- the scalar table vs the spec

class RandomKernelScalar : public ::testing::TestWithParam<RandomOp> {};

TEST_P(RandomKernelScalar, MatchesTheStreamDefinition) {
  const uint64_t count = kLargeCount + kMaxFirst;
  for (const RandomParams& p : cases_of(GetParam())) {
    SCOPED_TRACE(describe(p));
    const std::vector<uint8_t> got = scalar_fill(p, count);
    const size_t s = elem_size(p.dtype);
    SpecWords w(p.seed, p.offset);
    for (uint64_t e = 0; e < count; ++e) {
      const uint64_t g = load_elem(got.data() + e * s, s);
      if (p.op == RandomOp::Normal) {
        const double want = spec_normal(p, w, e);
        const double v = elem_value(p.dtype, g);
        double tol = 1e-5 * std::fabs(p.b) + 1e-6 * std::fabs(p.a);
        if (p.dtype == RandomDType::F16) tol += std::max(std::fabs(want) * 0x1p-11, 0x1p-25);
        if (p.dtype == RandomDType::BF16) tol += std::fabs(want) * 0x1p-8;
        if (p.dtype == RandomDType::F64) tol = 1e-12 * (std::fabs(p.b) + std::fabs(p.a));
        ASSERT_LE(std::fabs(v - want), tol) << "element " << e << " is " << v << ", want " << want;
      } else {
        const uint64_t want = spec_element(p, w, e);
        ASSERT_EQ(g, want) << "element " << e << " (" << elem_value(p.dtype, g) << " against "
                           << elem_value(p.dtype, want) << ")";
      }
    }
  }
}

TEST(RandomKernelScalar, NormalFloat32IsComputedInFloat32) {
  // Element 2e = mean + std * r cos(2 pi u2), element 2e + 1 the sine, all in float32, each
  // step rounded once: z within 2 ulp of the correctly rounded steps' z (the same z but for
  // about 0.2 % of the elements), then mean + std * z in float32 exactly.
  RandomParams p;
  p.op = RandomOp::Normal;
  p.dtype = RandomDType::F32;
  p.seed = 1234;
  p.offset = 5;
  p.a = 0.25;
  p.b = 2.0;
  const uint64_t n = 40001;  // odd: the last pair's sine is dropped
  std::vector<float> got(n);
  mpsrt::cpu::simd_ops_for(Isa::Scalar).random(got.data(), p, 0, n);
  uint64_t moved = 0;
  for (uint64_t e = 0; e < n; ++e) {
    const uint32_t w0 = philox::word(p.seed, p.offset, e & ~uint64_t(1));
    const uint32_t w1 = philox::word(p.seed, p.offset, e | 1);
    const float u1 = static_cast<float>((w0 >> 8) + 1) * 0x1p-24f;
    const float u2 = static_cast<float>(w1 >> 8) * 0x1p-24f;
    // logf, sinf and cosf correctly rounded (long double, rounded to float; libm's float
    // functions may be an ulp off).
    const auto lf = static_cast<float>(std::log(static_cast<long double>(u1)));
    const float r = std::sqrt(-2.0f * lf);
    volatile float t = 6.28318530717958647692f * u2;
    const long double tl = t;
    const auto trig = static_cast<float>(e % 2 ? std::sin(tl) : std::cos(tl));
    volatile float z = r * trig;
    bool found = false;
    for (int k = 0; k <= 4 && !found; ++k) {  // z, z + 1 ulp, z - 1 ulp, z + 2 ulp, z - 2 ulp
      float zk = z;
      for (int i = 0; i < (k + 1) / 2; ++i) zk = std::nextafter(zk, k % 2 ? INFINITY : -INFINITY);
      volatile float sz = 2.0f * zk;
      const float want = 0.25f + sz;
      if (f32_to_bits(got[e]) == f32_to_bits(want)) {
        found = true;
        moved += k > 0;
      }
    }
    ASSERT_TRUE(found) << "element " << e << " is " << got[e] << ", not 0.25 + 2 z with z within "
                       << "2 ulp of " << z;
  }
  EXPECT_LE(moved, n / 100);
}

std::string op_param_name(const ::testing::TestParamInfo<RandomOp>& p) {
  return mpsrt::random_op_name(p.param);
}

INSTANTIATE_TEST_SUITE_P(RandomKernel, RandomKernelScalar,
                         ::testing::Values(RandomOp::Bits, RandomOp::Uniform, RandomOp::Normal,
                                           RandomOp::IntRange, RandomOp::Bernoulli),
                         op_param_name);

// ---------------------------------------------------------------- every table vs the scalar one

struct IsaOp {
  Isa isa;
  RandomOp op;
};
void PrintTo(const IsaOp& p, std::ostream* os) {
  *os << mpsrt::cpu::isa_name(p.isa) << " " << mpsrt::random_op_name(p.op);
}
std::vector<IsaOp> isa_ops() {
  std::vector<IsaOp> out;
  for (Isa isa : supported_isas()) {
    for (RandomOp op : {RandomOp::Bits, RandomOp::Uniform, RandomOp::Normal, RandomOp::IntRange,
                        RandomOp::Bernoulli}) {
      out.push_back({isa, op});
    }
  }
  return out;
}

uint64_t adjust_first(const RandomParams& p, uint64_t first) {
  return p.op == RandomOp::Normal ? first & ~uint64_t(1) : first;
}

class RandomKernelIsa : public ::testing::TestWithParam<IsaOp> {
 protected:
  Isa isa() const { return GetParam().isa; }
  RandomOp op() const { return GetParam().op; }
  const mpsrt::cpu::SimdOps& k() const { return mpsrt::cpu::simd_ops_for(isa()); }
  // The large count exists for the SIMD tables' fused bodies and streaming stores; the scalar
  // table has neither (one loop for every count), so it takes a count past its 1024-element
  // chunks at a fraction of the time (its float32 normal calls fmaf per operation, which
  // sanitizer builds do not inline).
  uint64_t large_count() const {
    return isa() == Isa::Scalar ? (uint64_t(1) << 14) + 3 : kLargeCount;
  }
};

// Counts 0..80, 1000 and 4099 from every first element, each at its own destination shift.
TEST_P(RandomKernelIsa, SmallCountsMatchScalar) {
  std::vector<uint64_t> counts;
  for (uint64_t n = 0; n <= 80; ++n) counts.push_back(n);
  counts.push_back(1000);
  counts.push_back(4099);
  for (const RandomParams& p : cases_of(op())) {
    SCOPED_TRACE(describe(p));
    const std::vector<uint8_t> want = scalar_fill(p, 4099 + kMaxFirst);
    const size_t s = elem_size(p.dtype);
    Dest d(4099 + kMaxFirst + kMaxMis, s);
    for (uint64_t first0 : kFirsts) {
      const uint64_t first = adjust_first(p, first0);
      for (uint64_t n : counts) {
        const size_t mis = (n + first0) % (kMaxMis + 1);
        uint8_t* dst = d.reset(mis);
        k().random(dst, p, first, n);
        ASSERT_TRUE(same_elements(p, dst + first * s, want.data() + first * s, n, first))
            << "first=" << first << " n=" << n << " shift=" << mis;
        ASSERT_TRUE(guards_intact(d, dst + first * s, n))
            << "first=" << first << " n=" << n << " shift=" << mis;
      }
    }
  }
}

// (1 << 20) + 3 elements: past the streaming-store threshold for 4- and 8-byte elements.
TEST_P(RandomKernelIsa, LargeCountsMatchScalar) {
  for (const RandomParams& p : cases_of(op())) {
    SCOPED_TRACE(describe(p));
    const uint64_t large = large_count();
    const std::vector<uint8_t> want = scalar_fill(p, large + kMaxFirst);
    const size_t s = elem_size(p.dtype);
    Dest d(large + kMaxFirst + kMaxMis, s);
    for (uint64_t first0 : kFirsts) {
      const uint64_t first = adjust_first(p, first0);
      for (size_t mis : {size_t(0), size_t(first0 % 16 == 0 ? 3 : first0 % 16)}) {
        uint8_t* dst = d.reset(mis);
        k().random(dst, p, first, large);
        ASSERT_TRUE(same_elements(p, dst + first * s, want.data() + first * s, large, first))
            << "first=" << first << " shift=" << mis;
        ASSERT_TRUE(guards_intact(d, dst + first * s, large))
            << "first=" << first << " shift=" << mis;
      }
    }
  }
}

// Two calls [0, k) and [k, n) write what one call [0, n) writes, bit for bit. With count = n
// the pieces of the large fill use streaming stores however small they are.
TEST_P(RandomKernelIsa, SplitCallsEqualOneCall) {
  for (RandomParams p : cases_of(op())) {
    SCOPED_TRACE(describe(p));
    const size_t s = elem_size(p.dtype);
    for (uint64_t n : {uint64_t(4099), large_count()}) {
      p.count = n;
      Dest whole(n, s);
      uint8_t* w = whole.reset(0);
      k().random(w, p, 0, n);
      for (uint64_t k0 : {uint64_t(1), uint64_t(3), uint64_t(4), uint64_t(17), uint64_t(64),
                          uint64_t(1000), uint64_t(2050), n / 2, n - 1}) {
        const uint64_t kk = adjust_first(p, k0);
        Dest split(n, s);
        uint8_t* d = split.reset(0);
        k().random(d, p, 0, kk);
        k().random(d, p, kk, n - kk);
        ASSERT_EQ(std::memcmp(d, w, n * s), 0) << "n=" << n << " split at " << kk;
      }
    }
  }
}

std::string isa_op_name(const ::testing::TestParamInfo<IsaOp>& p) {
  return std::string(mpsrt::cpu::isa_name(p.param.isa)) + "_" + mpsrt::random_op_name(p.param.op);
}

INSTANTIATE_TEST_SUITE_P(RandomKernel, RandomKernelIsa, ::testing::ValuesIn(isa_ops()),
                         isa_op_name);

// ---------------------------------------------------------------- per table

class RandomKernelTable : public ::testing::TestWithParam<Isa> {
 protected:
  const mpsrt::cpu::SimdOps& k() const { return mpsrt::cpu::simd_ops_for(GetParam()); }
};

TEST_P(RandomKernelTable, TableMatchesItsIsa) {
  EXPECT_EQ(k().isa, GetParam());
  EXPECT_NE(k().random, nullptr);
}

// Bits: word j of the op, straight from philox.h.
TEST_P(RandomKernelTable, BitsAreThePhiloxWords) {
  RandomParams p;
  p.seed = 0xfedcba9876543210ULL;
  p.offset = (uint64_t(1) << 32) - 3;
  const uint64_t n = 100003;
  std::vector<uint32_t> v(n + 1);
  for (uint64_t first : {uint64_t(0), uint64_t(1), uint64_t(5), uint64_t(64)}) {
    k().random(v.data(), p, first, n - first);
    for (uint64_t j = first; j < n; ++j) {
      ASSERT_EQ(v[j], philox::word(p.seed, p.offset, j)) << "word " << j << " first=" << first;
    }
  }
}

// Integer ranges up to 2^32 (one word) and past it (two words), against w % range.
TEST_P(RandomKernelTable, IntRangeSweep) {
  std::vector<uint64_t> ranges = {1, 2, 3, 5, 255, 256, 257, 65535, 65537, 1000003};
  for (int bits : {31, 32}) {  // around 2^31 and 2^32 (one word up to 2^32, two past it)
    for (int d = -3; d <= 2; ++d) ranges.push_back((uint64_t(1) << bits) + d);
  }
  ranges.push_back(uint64_t(1) << 63);
  ranges.push_back(~uint64_t(0));
  uint64_t x = 0x243f6a8885a308d3ULL;  // more ranges, spread over 1 .. 2^32
  for (int i = 0; i < 100; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ranges.push_back((x >> (33 + i % 30)) + 1);
  }
  const uint64_t n = 1000;
  std::vector<uint64_t> v(n);
  for (uint64_t r : ranges) {
    RandomParams p;
    p.op = RandomOp::IntRange;
    p.dtype = RandomDType::I64;
    p.seed = r * 0x9e3779b97f4a7c15ULL;
    p.offset = r;
    p.low = -17;
    p.range = r;
    k().random(v.data(), p, 0, n);
    SpecWords w(p.seed, p.offset);
    for (uint64_t e = 0; e < n; ++e) {
      ASSERT_EQ(v[e], spec_element(p, w, e)) << "range " << r << " element " << e;
    }
  }
}

// Normal tolerates an odd first element too (each element depends on its pair alone).
TEST_P(RandomKernelTable, NormalOddFirst) {
  for (const RandomParams& p : cases_of(RandomOp::Normal)) {
    SCOPED_TRACE(describe(p));
    const size_t s = elem_size(p.dtype);
    const std::vector<uint8_t> want = scalar_fill(p, 200);
    Dest d(200, s);
    for (uint64_t first : {uint64_t(1), uint64_t(5), uint64_t(63)}) {
      for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(7), uint64_t(100)}) {
        uint8_t* dst = d.reset(0);
        k().random(dst, p, first, n);
        ASSERT_TRUE(same_elements(p, dst + first * s, want.data() + first * s, n, first))
            << "first=" << first << " n=" << n;
        ASSERT_TRUE(guards_intact(d, dst + first * s, n)) << "first=" << first << " n=" << n;
      }
    }
  }
}

// Unsupported combinations write nothing.
TEST_P(RandomKernelTable, UnsupportedCombinationsWriteNothing) {
  for (RandomOp op : {RandomOp::Bits, RandomOp::Uniform, RandomOp::Normal, RandomOp::IntRange,
                      RandomOp::Bernoulli}) {
    RandomParams p;
    p.op = op;
    for (RandomDType dt :
         {RandomDType::U8, RandomDType::I32, RandomDType::I64, RandomDType::U32, RandomDType::F16,
          RandomDType::BF16, RandomDType::F32, RandomDType::F64, RandomDType::Bool, RandomDType::I8,
          RandomDType::I16, RandomDType::U16, RandomDType::U64}) {
      if (mpsrt::cpu::random_supported(op, dt)) continue;
      p.dtype = dt;
      Dest d(100, 8);
      uint8_t* dst = d.reset(0);
      k().random(dst, p, 0, 100);
      EXPECT_TRUE(guards_intact(d, dst, 0)) << describe(p);
    }
  }
}

// The one statistical check here: the mean of a million float32 uniforms.
TEST_P(RandomKernelTable, UniformFloat32Mean) {
  RandomParams p;
  p.op = RandomOp::Uniform;
  p.dtype = RandomDType::F32;
  p.seed = 0x9e3779b97f4a7c15ULL;
  std::vector<float> v(kLargeCount);
  k().random(v.data(), p, 0, v.size());
  double sum = 0, lo = 1, hi = 0;
  for (float x : v) {
    sum += x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  EXPECT_NEAR(sum / static_cast<double>(v.size()), 0.5, 0.0015);  // ~5 sigma
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& p) {
  return mpsrt::cpu::isa_name(p.param);
}

INSTANTIATE_TEST_SUITE_P(RandomKernel, RandomKernelTable, ::testing::ValuesIn(supported_isas()),
                         isa_param_name);

// ---------------------------------------------------------------- normal accuracy

// The reference of element e of a normal op with mean 0 and std 1: the definition's steps
// (mpsrt/philox.h) with each function correctly rounded (computed in long double and rounded;
// a long double result within 2^-64 relative of a rounding tie could round the other way,
// which is rare enough not to matter here). float16 / bfloat16 round the float32 value.
uint64_t reference_normal(RandomDType dt, uint32_t w0, uint32_t w1, bool sine) {
  if (dt == RandomDType::F64) {
    const double u1 = static_cast<double>((w0 >> 8) + 1) * 0x1p-24;
    const double u2 = static_cast<double>(w1 >> 8) * 0x1p-24;
    const auto l = static_cast<double>(std::log(static_cast<long double>(u1)));
    const double r = std::sqrt(-2.0 * l);
    volatile double t = 6.28318530717958647692 * u2;
    const long double tl = t;
    const auto c = static_cast<double>(sine ? std::sin(tl) : std::cos(tl));
    const double z = 0.0 + r * c;  // mean + std * z with mean 0, std 1: -0 becomes +0
    uint64_t x;
    std::memcpy(&x, &z, 8);
    return x;
  }
  const float u1 = static_cast<float>((w0 >> 8) + 1) * 0x1p-24f;
  const float u2 = static_cast<float>(w1 >> 8) * 0x1p-24f;
  const auto l = static_cast<float>(std::log(static_cast<long double>(u1)));
  const float r = std::sqrt(-2.0f * l);
  volatile float t = 6.28318530717958647692f * u2;
  const long double tl = t;
  const auto c = static_cast<float>(sine ? std::sin(tl) : std::cos(tl));
  const float z = 0.0f + r * c;
  if (dt == RandomDType::F16) return ref_f16(z);
  if (dt == RandomDType::BF16) return ref_bf16(z);
  return f32_to_bits(z);
}

// ulps between two values of dt (float64: double ulps), by their ordered bit patterns.
int64_t ulps_in_dtype(RandomDType dt, uint64_t a, uint64_t b) {
  if (dt != RandomDType::F64) return ulp_distance(dt, a, b);
  auto ord = [](uint64_t x) {
    return (x >> 63) ? -static_cast<int64_t>(x & ~(uint64_t(1) << 63)) : static_cast<int64_t>(x);
  };
  const int64_t d = ord(a) - ord(b);
  return d < 0 ? -d : d;
}

struct NormalErrors {
  int64_t max_ulp = 0;   // in the dtype's ulps (float64: double ulps)
  int64_t max_f32 = 0;   // float64 only: in float32 ulps of the value, as API.md's promise
  uint64_t inexact = 0;  // elements that differ from the reference
};

// The table's normals of `count` elements (mean 0, std 1) against the reference.
NormalErrors normal_errors(Isa isa, RandomDType dt, uint64_t count, uint64_t seed,
                           bool verbose = false) {
  const size_t s = elem_size(dt);
  constexpr uint64_t kPiece = uint64_t(1) << 20;
  std::vector<uint8_t> buf(kPiece * s);
  NormalErrors out;
  RandomParams p;
  p.op = RandomOp::Normal;
  p.dtype = dt;
  p.a = 0;
  p.b = 1;
  p.seed = seed;
  for (uint64_t done = 0; done < count; done += kPiece) {
    const uint64_t n = std::min(kPiece, count - done);
    p.offset = done / 4;  // kPiece is a multiple of 4: consecutive pieces of one stream
    p.count = n;
    mpsrt::cpu::simd_ops_for(isa).random(buf.data(), p, 0, n);
    SpecWords w(p.seed, p.offset);
    for (uint64_t e = 0; e < n; ++e) {
      const uint64_t got = load_elem(buf.data() + e * s, s);
      const uint64_t want = reference_normal(dt, w(e & ~uint64_t(1)), w(e | 1), (e & 1) != 0);
      if (got == want) continue;
      if (verbose && out.inexact < 8) {
        std::printf("  %s element %llu: got %a, want %a\n", mpsrt::dtype_info(dt).name,
                    static_cast<unsigned long long>(done + e), elem_value(dt, got),
                    elem_value(dt, want));
      }
      ++out.inexact;
      out.max_ulp = std::max(out.max_ulp, ulps_in_dtype(dt, got, want));
      if (dt == RandomDType::F64) out.max_f32 = std::max(out.max_f32, ulp_distance(dt, got, want));
    }
  }
  return out;
}

const RandomDType kNormalDtypes[] = {RandomDType::F32, RandomDType::F16, RandomDType::BF16,
                                     RandomDType::F64};

// Against the correctly rounded steps: float32 (and so float16 / bfloat16) exact but for the
// values whose logf / cosf / sinf lie within about a thousandth of an ulp of a rounding tie
// (0.2 %), and then within API.md's 2 ulp; float64 within a few double ulps; every table.
TEST_P(RandomKernelTable, NormalAccuracy) {
  const uint64_t count = uint64_t(1) << 18;
  for (RandomDType dt : kNormalDtypes) {
    const NormalErrors e = normal_errors(GetParam(), dt, count, 0x5eed);
    SCOPED_TRACE(mpsrt::dtype_info(dt).name);
    EXPECT_LE(e.max_ulp, dt == RandomDType::F64 ? 4 : 2);
    EXPECT_LE(e.inexact, dt == RandomDType::F64 ? count : count / 200);
  }
}

// The measurement over 10^8 values per dtype (the best table; MPSRT_NORMAL_ACCURACY_COUNT
// changes the count). Run with --gtest_also_run_disabled_tests
// --gtest_filter='RandomKernelNormal*'.
TEST(RandomKernelNormal, DISABLED_Accuracy) {
  uint64_t count = 100000000;
  if (const char* c = std::getenv("MPSRT_NORMAL_ACCURACY_COUNT"))
    count = std::strtoull(c, nullptr, 10);
  const Isa isa = mpsrt::cpu::best_isa();
  for (RandomDType dt : kNormalDtypes) {
    const NormalErrors e = normal_errors(isa, dt, count, 0x0123456789abcdefULL, true);
    std::printf("%-7s normal %-5s %llu values: max %lld ulp (float32 ulps: %lld), %llu inexact\n",
                mpsrt::cpu::isa_name(isa), mpsrt::dtype_info(dt).name,
                static_cast<unsigned long long>(count), static_cast<long long>(e.max_ulp),
                static_cast<long long>(dt == RandomDType::F64 ? e.max_f32 : e.max_ulp),
                static_cast<unsigned long long>(e.inexact));
    EXPECT_LE(dt == RandomDType::F64 ? e.max_f32 : e.max_ulp, 2);
  }
}

// ---------------------------------------------------------------- throughput (not run by default)

// Single-thread GB/s of a 64 MB fill per table and op. Run with
// --gtest_also_run_disabled_tests --gtest_filter='RandomKernelBench*'.
TEST(RandomKernelBench, DISABLED_Throughput) {
  const size_t bytes = size_t(64) << 20;
  std::vector<uint8_t> storage(bytes + 64);
  uint8_t* buf = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  struct Item {
    const char* name;
    RandomOp op;
    RandomDType dt;
    double a, b;
  };
  const Item items[] = {
      {"bits u32", RandomOp::Bits, RandomDType::U32, 0, 1},
      {"uniform f32", RandomOp::Uniform, RandomDType::F32, 0, 1},
      {"uniform f32 (-1, 3)", RandomOp::Uniform, RandomDType::F32, -1, 3},
      {"uniform f64", RandomOp::Uniform, RandomDType::F64, 0, 1},
      {"uniform f16", RandomOp::Uniform, RandomDType::F16, 0, 1},
      {"normal f32", RandomOp::Normal, RandomDType::F32, 0, 1},
      {"normal f32 (3, 0.5)", RandomOp::Normal, RandomDType::F32, 3, 0.5},
      {"normal f64", RandomOp::Normal, RandomDType::F64, 0, 1},
      {"normal f16", RandomOp::Normal, RandomDType::F16, 0, 1},
      {"normal bf16", RandomOp::Normal, RandomDType::BF16, 0, 1},
      {"int_range i64 [0,1000)", RandomOp::IntRange, RandomDType::I64, 0, 1},
      {"bernoulli u8", RandomOp::Bernoulli, RandomDType::U8, 0, 1},
  };
  for (Isa isa : supported_isas()) {
    for (const Item& it : items) {
      RandomParams p;
      p.op = it.op;
      p.dtype = it.dt;
      p.a = it.a;
      p.b = it.b;
      p.range = 1000;
      p.threshold = philox::bernoulli_threshold(0.5);
      p.seed = 7;
      const uint64_t n = bytes / elem_size(it.dt);
      p.count = n;
      const auto& fn = mpsrt::cpu::simd_ops_for(isa).random;
      fn(buf, p, 0, n);  // warm the pages
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        fn(buf, p, 0, n);
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, dt);
        p.offset += n;
      }
      std::printf("%-8s %-24s %7.2f GB/s\n", mpsrt::cpu::isa_name(isa), it.name,
                  static_cast<double>(bytes) / best / 1e9);
    }
  }
}

}  // namespace
