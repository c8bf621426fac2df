// Tests of the cpu backend's fill and copy kernels (backends/cpu/simd_ops.h), for every
// instruction set this build and this CPU support, with and without streaming stores, at
// every destination misalignment within a cache line. Every byte of the result is checked,
// as are the guard bytes on both sides of the range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_ops.h"

namespace {

using mpsrt::cpu::Isa;
using mpsrt::cpu::SimdOps;

constexpr size_t kLine = 64;      // largest vector width, and the misalignments covered
constexpr size_t kGuardLen = 64;  // guard bytes checked on each side of a range
constexpr uint8_t kGuard = 0xCC;  // never a byte of a test pattern
constexpr size_t kMiB = size_t(1) << 20;

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (mpsrt::cpu::isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

// A zero-initialised buffer whose data() is 64-byte aligned, so that data() + k is
// misaligned by exactly k.
class Scratch {
 public:
  explicit Scratch(size_t n) : storage_(n + kLine) {
    const auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    base_ = storage_.data() + ((kLine - addr % kLine) % kLine);
  }
  uint8_t* data() noexcept { return base_; }

 private:
  std::vector<uint8_t> storage_;
  uint8_t* base_;
};

uint8_t pattern_byte(uint64_t pattern8, size_t i) {
  return static_cast<uint8_t>(pattern8 >> (8 * (i & 7)));
}

// Checks [p - kGuardLen, p) and [p + n, p + n + kGuardLen) hold kGuard and byte i of
// [p, p + n) equals want(i). Reports the first bad byte.
template <class Want>
::testing::AssertionResult check_range(const uint8_t* p, size_t n, Want want) {
  for (size_t i = 0; i < kGuardLen; ++i) {
    if (p[-1 - static_cast<ptrdiff_t>(i)] != kGuard) {
      return ::testing::AssertionFailure() << "guard byte " << i + 1 << " before the range "
                                           << "was overwritten";
    }
    if (p[n + i] != kGuard) {
      return ::testing::AssertionFailure() << "guard byte " << i << " after the range "
                                           << "was overwritten";
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != want(i)) {
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << n << " is " << static_cast<int>(p[i]) << ", want "
             << static_cast<int>(want(i));
    }
  }
  return ::testing::AssertionSuccess();
}

class KernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  const SimdOps& k() const { return mpsrt::cpu::simd_ops_for(GetParam()); }

  // Fills n bytes at destination misalignment mis and checks the result and the guards.
  ::testing::AssertionResult fill_once(Scratch& s, size_t n, size_t mis, uint64_t p8, bool nt) {
    std::memset(s.data(), kGuard, kGuardLen + mis + n + kGuardLen);
    uint8_t* dst = s.data() + kGuardLen + mis;
    k().fill(dst, n, p8, nt);
    return check_range(dst, n, [&](size_t i) { return pattern_byte(p8, i); });
  }

  // Copies n bytes from src (any alignment) to destination misalignment mis and checks.
  ::testing::AssertionResult copy_once(Scratch& s, const uint8_t* src, size_t n, size_t mis,
                                       bool nt) {
    std::memset(s.data(), kGuard, kGuardLen + mis + n + kGuardLen);
    uint8_t* dst = s.data() + kGuardLen + mis;
    k().copy(dst, src, n, nt);
    return check_range(dst, n, [&](size_t i) { return src[i]; });
  }
};

// Patterns as the backend passes them: 1-, 2-, 4- and 8-byte patterns replicated to 8 bytes.
// The 1-byte one takes glibc memset's path; the others the vector loop.
std::vector<uint64_t> test_patterns() {
  return {mpsrt::cpu::replicate_pattern(0xA5, 1), mpsrt::cpu::replicate_pattern(0x2211, 2),
          mpsrt::cpu::replicate_pattern(0x44332211, 4), 0x8877665544332211ULL};
}

TEST_P(KernelTest, TableMatchesItsIsa) {
  EXPECT_EQ(k().isa, GetParam());
  EXPECT_NE(k().fill, nullptr);
  EXPECT_NE(k().copy, nullptr);
}

TEST_P(KernelTest, FillShortLengthsAtEveryMisalignment) {
  Scratch s(2 * kGuardLen + kLine + 300);
  for (bool nt : {false, true}) {
    for (uint64_t p8 : test_patterns()) {
      for (size_t n = 0; n <= 300; ++n) {
        for (size_t mis = 0; mis < kLine; ++mis) {
          ASSERT_TRUE(fill_once(s, n, mis, p8, nt))
              << "nt=" << nt << " pattern=0x" << std::hex << p8 << std::dec << " n=" << n
              << " misalignment=" << mis;
        }
      }
    }
  }
}

TEST_P(KernelTest, FillMediumLengthsAtEveryMisalignment) {
  const size_t lengths[] = {383, 384, 385, 511, 512, 513, 1000, 1031, 4096, 4099};
  Scratch s(2 * kGuardLen + kLine + 4099);
  for (bool nt : {false, true}) {
    for (uint64_t p8 : test_patterns()) {
      for (size_t n : lengths) {
        for (size_t mis = 0; mis < kLine; ++mis) {
          ASSERT_TRUE(fill_once(s, n, mis, p8, nt))
              << "nt=" << nt << " pattern=0x" << std::hex << p8 << std::dec << " n=" << n
              << " misalignment=" << mis;
        }
      }
    }
  }
}

TEST_P(KernelTest, FillLarge) {
  const size_t n = kMiB + 13;
  Scratch s(2 * kGuardLen + kLine + n);
  for (bool nt : {false, true}) {
    for (uint64_t p8 : test_patterns()) {
      for (size_t mis : {size_t(0), size_t(1), size_t(8), size_t(31), size_t(32), size_t(63)}) {
        ASSERT_TRUE(fill_once(s, n, mis, p8, nt)) << "nt=" << nt << " pattern=0x" << std::hex << p8
                                                  << std::dec << " misalignment=" << mis;
      }
    }
  }
}

class CopyKernelTest : public KernelTest {
 protected:
  static constexpr size_t kSrcMis[] = {0, 1, 7, 31, 32, 63};

  void run_lengths(const std::vector<size_t>& lengths, const std::vector<size_t>& dst_mis) {
    size_t max_n = 0;
    for (size_t n : lengths) max_n = std::max(max_n, n);
    Scratch src(kLine + max_n);
    std::mt19937 gen(12345);
    for (size_t i = 0; i < kLine + max_n; ++i) src.data()[i] = static_cast<uint8_t>(gen() >> 24);
    const std::vector<uint8_t> original(src.data(), src.data() + kLine + max_n);
    Scratch dst(2 * kGuardLen + kLine + max_n);
    for (bool nt : {false, true}) {
      for (size_t n : lengths) {
        for (size_t smis : kSrcMis) {
          for (size_t dmis : dst_mis) {
            ASSERT_TRUE(copy_once(dst, src.data() + smis, n, dmis, nt))
                << "nt=" << nt << " n=" << n << " src misalignment=" << smis
                << " dst misalignment=" << dmis;
          }
        }
        ASSERT_EQ(std::memcmp(src.data(), original.data(), original.size()), 0)
            << "the copy wrote to its source (n=" << n << ")";
      }
    }
  }
};

std::vector<size_t> all_misalignments() {
  std::vector<size_t> v;
  for (size_t i = 0; i < kLine; ++i) v.push_back(i);
  return v;
}

TEST_P(CopyKernelTest, CopyShortLengthsAtEveryMisalignment) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  run_lengths(lengths, all_misalignments());
}

TEST_P(CopyKernelTest, CopyMediumLengthsAtEveryMisalignment) {
  // Streaming copies start at 8 vector widths (512 bytes for AVX-512).
  run_lengths({383, 384, 385, 511, 512, 513, 1000, 1031, 4096, 4099}, all_misalignments());
}

TEST_P(CopyKernelTest, CopyLarge) {
  run_lengths({kMiB + 13}, {0, 1, 8, 32, 63});
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& p) {
  return mpsrt::cpu::isa_name(p.param);
}

INSTANTIATE_TEST_SUITE_P(Supported, KernelTest, ::testing::ValuesIn(supported_isas()),
                         isa_param_name);
INSTANTIATE_TEST_SUITE_P(Supported, CopyKernelTest, ::testing::ValuesIn(supported_isas()),
                         isa_param_name);

// ---------------------------------------------------------------- tables, names, patterns

TEST(SimdOps, ReplicatePattern) {
  using mpsrt::cpu::replicate_pattern;
  EXPECT_EQ(replicate_pattern(0xAB, 1), 0xABABABABABABABABULL);
  EXPECT_EQ(replicate_pattern(0x00, 1), 0ULL);
  EXPECT_EQ(replicate_pattern(0x1234, 2), 0x1234123412341234ULL);
  EXPECT_EQ(replicate_pattern(0xDEADBEEF, 4), 0xDEADBEEFDEADBEEFULL);
  EXPECT_EQ(replicate_pattern(0x0123456789ABCDEFULL, 8), 0x0123456789ABCDEFULL);
  // Bytes above the pattern size are ignored.
  EXPECT_EQ(replicate_pattern(0xFFFFFF01ULL, 1), 0x0101010101010101ULL);
  EXPECT_EQ(replicate_pattern(0x0123456789ABCDEFULL, 1), 0xEFEFEFEFEFEFEFEFULL);
  EXPECT_EQ(replicate_pattern(0x0123456789ABCDEFULL, 2), 0xCDEFCDEFCDEFCDEFULL);
  EXPECT_EQ(replicate_pattern(0x0123456789ABCDEFULL, 4), 0x89ABCDEF89ABCDEFULL);
}

TEST(SimdOps, ScalarAndBestAreSupported) {
  using mpsrt::cpu::isa_supported;
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  const Isa best = mpsrt::cpu::best_isa();
  EXPECT_TRUE(isa_supported(best));
  for (Isa isa : supported_isas()) {
    EXPECT_LE(static_cast<int>(isa), static_cast<int>(best))
        << mpsrt::cpu::isa_name(isa) << " is supported but best_isa() is "
        << mpsrt::cpu::isa_name(best);
  }
  for (Isa isa : supported_isas()) EXPECT_EQ(mpsrt::cpu::simd_ops_for(isa).isa, isa);
#if defined(__x86_64__)
  // The x86 tables are built on x86-64; support follows the CPU's feature flags.
  __builtin_cpu_init();
  EXPECT_EQ(isa_supported(Isa::Avx2), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(isa_supported(Isa::Avx512), __builtin_cpu_supports("avx512f") != 0 &&
                                            __builtin_cpu_supports("avx512bw") != 0 &&
                                            __builtin_cpu_supports("avx512vl") != 0);
#endif
}

TEST(SimdOps, IsaNamesRoundTrip) {
  EXPECT_STREQ(mpsrt::cpu::isa_name(Isa::Scalar), "scalar");
  EXPECT_STREQ(mpsrt::cpu::isa_name(Isa::Avx2), "avx2");
  EXPECT_STREQ(mpsrt::cpu::isa_name(Isa::Avx512), "avx512");
  // Name -> Isa through the cpu backend's MPSRT_CPU_ISA parsing, Isa -> name through the
  // device's details ("kernels=<name>").
  mpsrt::backend::Backend& cpu = mpsrt::backend::cpu_backend();
  for (const char* name : {"scalar", "avx2", "avx512"}) {
    SCOPED_TRACE(name);
    Isa isa = Isa::Scalar;
    int matches = 0;
    for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (std::string(mpsrt::cpu::isa_name(i)) == name) {
        isa = i;
        ++matches;
      }
    }
    ASSERT_EQ(matches, 1);
    if (!mpsrt::cpu::isa_supported(isa)) continue;
    mpsrt::cpu::CpuConfig cfg;
    cfg.isa = name;
    mpsrt::cpu::configure(cfg);
    EXPECT_EQ(cpu.open_device(0)->info().details, std::string("kernels=") + name);
  }
  mpsrt::cpu::configure(mpsrt::cpu::CpuConfig{});
}

}  // namespace
