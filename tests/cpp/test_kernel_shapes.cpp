// The kernels' edge cases on every backend, through the backend interface: fills at every
// byte phase around 16-byte boundaries (head and tail partial words, neighbours untouched),
// copies at every source / destination alignment pair mod 16 (between heaps, inside one heap,
// overlapping in both directions, longer than the vulkan backend's scratch buffer), random
// fills at every element phase mod 32 and short counts against the cpu backend's scalar
// reference, and a heap past 4 GiB (ranges across 2^32 bytes and, on vulkan, across the
// VkBuffers of one heap). On vulkan every test runs under several kernel settings
// (VulkanConfig: workgroup size, workgroups per dispatch, unroll, vector width, copy path).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_ops.h"
#include "backends/vulkan/vulkan_backend.h"
#include "element_value.h"

namespace {

namespace mb = mpsrt::backend;
using mb::RandomDType;
using mb::RandomOp;
using mb::RandomParams;
using mpsrt::vk::VulkanConfig;

constexpr uint8_t kGuard = 0xCC;
constexpr uint64_t kPattern = 0x8877665544332211ULL;
constexpr size_t kMiB = size_t(1) << 20;

struct Variant {
  mb::Backend* backend;
  VulkanConfig vk;  // vulkan only
  std::string name;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (mb::Backend* b : mb::all_backends()) {
    if (!b->is_built() || !b->is_available()) continue;
    if (b != &mb::vulkan_backend()) {
      out.push_back({b, VulkanConfig{}, b->name()});
      continue;
    }
    out.push_back({b, VulkanConfig{}, "vulkan_default"});
    VulkanConfig one_group;  // one small workgroup loops over everything
    one_group.workgroup = 32;
    one_group.groups_per_sm = 1;
    one_group.unroll = 1;
    out.push_back({b, one_group, "vulkan_wg32_groups1_unroll1"});
    VulkanConfig big;
    big.workgroup = 1024;
    big.groups_per_sm = 2;
    big.unroll = 8;
    out.push_back({b, big, "vulkan_wg1024_groups2_unroll8"});
    VulkanConfig words;  // 32-bit accesses only, every copy through vkCmdCopyBuffer
    words.workgroup = 64;
    words.unroll = 4;
    words.vector_bytes = 4;
    words.copy_kernel = false;
    out.push_back({b, words, "vulkan_wg64_unroll4_vector4_dma"});
  }
  return out;
}

::testing::AssertionResult bytes_equal(const uint8_t* got, const uint8_t* want, size_t n) {
  size_t bad = 0, first = 0, last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] == want[i]) continue;
    if (bad++ == 0) first = i;
    last = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " bytes differ; the first at index " << first << ": got "
         << static_cast<int>(got[first]) << ", want " << static_cast<int>(want[first])
         << "; the last at index " << last;
}

void ref_fill(uint8_t* p, size_t n, uint64_t pattern, unsigned size) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(pattern >> (8 * (i % size)));
}

void random_bytes(uint8_t* p, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(gen() >> 24);
}

class KernelShapes : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const Variant& v = GetParam();
    if (v.backend == &mb::cpu_backend()) mpsrt::cpu::configure(mpsrt::cpu::CpuConfig{});
    if (v.backend == &mb::vulkan_backend()) mpsrt::vk::configure(v.vk);
    device_ = v.backend->open_device(0);
    queue_ = device_->create_queue(0);
  }
  void TearDown() override {
    queue_.reset();
    device_.reset();
    if (GetParam().backend == &mb::vulkan_backend()) mpsrt::vk::configure(VulkanConfig{});
  }
  bool is_vulkan() const { return GetParam().backend == &mb::vulkan_backend(); }
  void run(std::unique_ptr<mb::CommandBuffer> cb) {
    auto done = std::make_shared<std::promise<mb::Completion>>();
    auto f = done->get_future();
    queue_->commit(std::move(cb), [done](const mb::Completion& c) { done->set_value(c); });
    ASSERT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    EXPECT_EQ(f.get().error, "");
  }
  std::unique_ptr<mb::Heap> heap(size_t n, uint8_t fill) {
    std::unique_ptr<mb::Heap> h = device_->create_heap(n);
    if (h == nullptr || h->host_ptr() == nullptr) return nullptr;
    std::memset(h->host_ptr(), fill, n);
    return h;
  }
  static uint8_t* bytes(const mb::Heap& h) { return static_cast<uint8_t*>(h.host_ptr()); }

  std::unique_ptr<mb::Device> device_;
  std::unique_ptr<mb::Queue> queue_;
};

// Lengths around the 4-byte words and 16-byte vectors (head, middle, tail of each kind).
const std::vector<size_t> kLengths = {0,  1,  2,  3,  4,  5,  6,   7,   8,   11,  12,   13,  15,
                                      16, 17, 19, 20, 23, 24, 28,  31,  32,  33,  35,   36,  47,
                                      48, 49, 63, 64, 65, 79, 127, 128, 129, 255, 1000, 4109};

TEST_P(KernelShapes, FillsAtEveryPhaseTouchOnlyTheirBytes) {
  for (unsigned psize : {1u, 2u, 4u, 8u}) {
    SCOPED_TRACE("pattern size " + std::to_string(psize));
    // Regions at phase 0..31 of a 64-byte boundary, 32 guard bytes at least between them.
    struct Region {
      size_t at, n;
    };
    std::vector<Region> regions;
    size_t cursor = 64;
    for (size_t phase = 0; phase < 32; ++phase) {
      for (size_t n : kLengths) {
        regions.push_back({cursor + phase, n});
        cursor = (cursor + phase + n + 32 + 63) / 64 * 64;
      }
    }
    std::unique_ptr<mb::Heap> h = heap(cursor + 64, kGuard);
    ASSERT_NE(h, nullptr);
    std::vector<uint8_t> ref(cursor + 64, kGuard);
    std::unique_ptr<mb::CommandBuffer> cb = queue_->create_command_buffer();
    for (const Region& r : regions) {
      cb->fill({h.get(), r.at}, r.n, kPattern, psize);
      ref_fill(ref.data() + r.at, r.n, kPattern, psize);
    }
    run(std::move(cb));
    EXPECT_TRUE(bytes_equal(bytes(*h), ref.data(), ref.size()));
  }
}

TEST_P(KernelShapes, CopiesAtEveryAlignmentPairBetweenHeapsAndInOne) {
  const std::vector<size_t> lengths = {1,  2,  3,  4,  5,  15, 16,  17,
                                       31, 32, 33, 48, 63, 64, 100, 4099};
  size_t src_bytes = 64, dst_bytes = 64;
  for (size_t sp = 0; sp < 16; ++sp) {
    for (size_t dp = 0; dp < 16; ++dp) {
      for (size_t n : lengths) {
        src_bytes = (src_bytes + sp + n + 63) / 64 * 64;
        dst_bytes = (dst_bytes + dp + n + 16 + 63) / 64 * 64;
      }
    }
  }
  for (bool one_heap : {false, true}) {
    SCOPED_TRACE(one_heap ? "inside one heap" : "between heaps");
    // One heap: the sources in its first part, the destinations after them.
    const size_t dst_base = one_heap ? src_bytes : 0;
    std::unique_ptr<mb::Heap> a = heap(src_bytes + (one_heap ? dst_bytes : 0), kGuard);
    std::unique_ptr<mb::Heap> b = one_heap ? nullptr : heap(dst_bytes, kGuard);
    ASSERT_NE(a, nullptr);
    mb::Heap* dst = one_heap ? a.get() : b.get();
    ASSERT_NE(dst, nullptr);
    random_bytes(bytes(*a), src_bytes, 11);
    std::vector<uint8_t> ref(bytes(*dst), bytes(*dst) + dst_base + dst_bytes);
    std::unique_ptr<mb::CommandBuffer> cb = queue_->create_command_buffer();
    size_t s = 64, d = dst_base + 64;
    for (size_t sp = 0; sp < 16; ++sp) {
      for (size_t dp = 0; dp < 16; ++dp) {
        for (size_t n : lengths) {
          cb->copy({a.get(), s + sp}, {dst, d + dp}, n);
          std::memcpy(ref.data() + d + dp, bytes(*a) + s + sp, n);
          s = (s + sp + n + 63) / 64 * 64;
          d = (d + dp + n + 16 + 63) / 64 * 64;
        }
      }
    }
    run(std::move(cb));
    EXPECT_TRUE(bytes_equal(bytes(*dst), ref.data(), ref.size()));
  }
}

TEST_P(KernelShapes, OverlappingCopiesAtEveryShift) {
  struct Op {
    size_t src, dst, n;
  };
  std::vector<Op> ops;
  size_t at = 4096;
  for (size_t n : {size_t(1), size_t(5), size_t(16), size_t(17), size_t(100), size_t(40000)}) {
    for (int shift = -33; shift <= 33; ++shift) {
      ops.push_back({at + 40, static_cast<size_t>(static_cast<long>(at) + 40 + shift), n});
      at += n + 128;
    }
  }
  // Longer than the vulkan backend's 8 MiB scratch buffer, in both directions, at shifts that
  // agree mod 16, mod 4 and not at all.
  for (size_t shift : {size_t(16), size_t(4), size_t(3)}) {
    ops.push_back({at + 7, at + 7 + shift, 20 * kMiB + 9});
    at += 21 * kMiB;
    ops.push_back({at + 5 + shift, at + 5, 20 * kMiB + 1});
    at += 21 * kMiB;
  }
  std::unique_ptr<mb::Heap> h = heap(at + 4096, 0);
  ASSERT_NE(h, nullptr);
  random_bytes(bytes(*h), at + 4096, 5);
  std::vector<uint8_t> ref(bytes(*h), bytes(*h) + at + 4096);
  std::unique_ptr<mb::CommandBuffer> cb = queue_->create_command_buffer();
  for (const Op& op : ops) {
    cb->copy({h.get(), op.src}, {h.get(), op.dst}, op.n);
    std::memmove(ref.data() + op.dst, ref.data() + op.src, op.n);
  }
  run(std::move(cb));
  EXPECT_TRUE(bytes_equal(bytes(*h), ref.data(), ref.size()));
}

struct RandomCase {
  RandomOp op;
  RandomDType dtype;
  double a = 0, b = 1;
  int64_t low = 0;
  uint64_t range = 1;
  uint64_t threshold = 0;
};

TEST_P(KernelShapes, RandomFillsAtEveryPhaseEqualTheReference) {
  // Every element size and both words-per-element counts; wide stores cover 4, 8, 16 and 32
  // bytes per Philox block.
  std::vector<RandomCase> cases = {
      {RandomOp::Bits, RandomDType::U32},
      {RandomOp::Uniform, RandomDType::F32, -3.25, 7.5},
      {RandomOp::Uniform, RandomDType::F16, 0, 1},
      {RandomOp::Uniform, RandomDType::BF16, 0, 1},
      {RandomOp::Uniform, RandomDType::F64, -1, 2},  // two words per element
      {RandomOp::Normal, RandomDType::F32, 10, 2.5},
      {RandomOp::Normal, RandomDType::F16, 0, 1},
      {RandomOp::Normal, RandomDType::F64, 0, 1},  // 32 bytes per block
  };
  RandomCase c{RandomOp::IntRange, RandomDType::U8};
  c.range = 256;
  cases.push_back(c);
  c = RandomCase{RandomOp::IntRange, RandomDType::I16};
  c.low = -300;
  c.range = 601;
  cases.push_back(c);
  c = RandomCase{RandomOp::IntRange, RandomDType::I64};
  c.low = -7;
  c.range = 100;  // one word per element: 32 bytes per block
  cases.push_back(c);
  c.range = (uint64_t(1) << 35) + 12345;  // two words per element
  cases.push_back(c);
  c = RandomCase{RandomOp::Bernoulli, RandomDType::Bool};
  c.threshold = uint64_t(1) << 31;
  cases.push_back(c);
  c.dtype = RandomDType::I8;
  cases.push_back(c);
  const std::vector<uint64_t> counts = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1001};
  for (const RandomCase& rc : cases) {
    const size_t es = mpsrt::dtype_size(rc.dtype);
    SCOPED_TRACE("op " + std::to_string(int(rc.op)) + " dtype " + std::to_string(int(rc.dtype)));
    struct Region {
      size_t at;
      uint64_t count, offset;
    };
    std::vector<Region> regions;
    size_t cursor = 64;
    uint64_t philox = 3;
    // Element-aligned phases 0..31 of a 64-byte boundary, and one phase that is not.
    std::vector<size_t> phases;
    for (size_t p = 0; p < 32; p += es) phases.push_back(p);
    if (es > 1) phases.push_back(1);
    for (size_t phase : phases) {
      for (uint64_t n : counts) {
        regions.push_back({cursor + phase, n, philox});
        cursor = (cursor + phase + n * es + 32 + 63) / 64 * 64;
        philox += 7;
      }
    }
    std::unique_ptr<mb::Heap> h = heap(cursor + 64, kGuard);
    ASSERT_NE(h, nullptr);
    std::vector<uint8_t> ref(cursor + 64, kGuard);
    std::unique_ptr<mb::CommandBuffer> cb = queue_->create_command_buffer();
    for (const Region& r : regions) {
      RandomParams p;
      p.count = r.count;
      p.seed = 0x5EED;
      p.offset = r.offset;
      p.op = rc.op;
      p.dtype = rc.dtype;
      p.a = rc.a;
      p.b = rc.b;
      p.low = rc.low;
      p.range = rc.range;
      p.threshold = rc.threshold;
      cb->random({h.get(), r.at}, p);
      // The reference in aligned memory (kernels store whole elements), then at r.at.
      std::vector<uint64_t> aligned((r.count * es + 7) / 8);
      mpsrt::cpu::random_scalar(aligned.data(), p, 0, r.count);
      std::memcpy(ref.data() + r.at, aligned.data(), r.count * es);
    }
    run(std::move(cb));
    const uint8_t* got = bytes(*h);
    if (rc.op != RandomOp::Normal) {
      EXPECT_TRUE(bytes_equal(got, ref.data(), ref.size()));
      continue;
    }
    // Normal: the guards exactly, the values within 2 float32 ulps (API.md).
    for (size_t i = 0, r = 0; i < ref.size(); ++i) {
      while (r < regions.size() && i >= regions[r].at + regions[r].count * es) ++r;
      const bool inside = r < regions.size() && i >= regions[r].at;
      if (!inside) {
        ASSERT_EQ(got[i], kGuard) << "guard byte " << i;
        continue;
      }
      const size_t e = (i - regions[r].at) / es;
      if ((i - regions[r].at) % es != 0) continue;
      const double x = mpsrt::test::element_as_double(rc.dtype, got + i),
                   y = mpsrt::test::element_as_double(rc.dtype, ref.data() + i);
      const int bits = rc.dtype == RandomDType::F16 ? 10 : 23;
      ASSERT_LE(std::fabs(x - y), 2 * std::max(std::ldexp(std::fabs(y), -bits), 0x1p-149))
          << "region " << r << " element " << e;
    }
  }
}

// Ranges longer than one storage-buffer window (128 MiB on lavapipe) at phases that make the
// windows' neighbouring dispatches share partial words.
TEST_P(KernelShapes, RangesAcrossWindowsAtOddPhases) {
  if (is_vulkan() && GetParam().name != "vulkan_default") GTEST_SKIP() << "the default only";
  const size_t n = 300 * kMiB;
  std::unique_ptr<mb::Heap> h = heap(2 * n + 4096, kGuard);
  ASSERT_NE(h, nullptr);
  uint8_t* p = bytes(*h);
  std::vector<uint8_t> ref(p, p + h->size());
  RandomParams f16;  // 2-byte elements at 2 mod 4: every block straddles two words
  f16.count = 70 * kMiB + 3;
  f16.seed = 3;
  f16.offset = 11;
  f16.op = RandomOp::Uniform;
  f16.dtype = RandomDType::F16;
  RandomParams u8;  // 1-byte elements at 1 mod 4
  u8.count = 140 * kMiB + 1;
  u8.seed = 4;
  u8.op = RandomOp::IntRange;
  u8.dtype = RandomDType::U8;
  u8.range = 256;
  const size_t f16_at = 4096 + 2, u8_at = f16_at + f16.count * 2 + 4096 + 1;
  const size_t copy_src = 16 + 3, copy_dst = n + 4096 + 7, copy_n = 290 * kMiB + 5;
  std::unique_ptr<mb::CommandBuffer> cb = queue_->create_command_buffer();
  cb->random({h.get(), f16_at}, f16);
  cb->random({h.get(), u8_at}, u8);
  cb->copy({h.get(), copy_src}, {h.get(), copy_dst}, copy_n);  // agree mod 4, not mod 16
  run(std::move(cb));
  mpsrt::cpu::random_scalar(ref.data() + f16_at, f16, 0, f16.count);
  mpsrt::cpu::random_scalar(ref.data() + u8_at, u8, 0, u8.count);
  std::memmove(ref.data() + copy_dst, ref.data() + copy_src, copy_n);
  EXPECT_TRUE(bytes_equal(p, ref.data(), ref.size()));
}

// A heap past 4 GiB: fills, copies and a random fill over ranges that cross 2^32 bytes and,
// on vulkan (lavapipe: maxBufferSize 4 GiB - 1), the boundaries of the heap's VkBuffers.
// Only the ranges used are touched, so the resident memory stays about 1 GiB.
TEST_P(KernelShapes, HeapPastFourGiB) {
  if (is_vulkan()) {
    const char* layers = std::getenv("VK_INSTANCE_LAYERS");
    if (layers != nullptr && std::strstr(layers, "validation") != nullptr) {
      GTEST_SKIP() << "the validation layer rejects allocations above the memory heap's "
                      "nominal size (lavapipe: 2 GiB)";
    }
    if (GetParam().name != "vulkan_default") GTEST_SKIP() << "run with the default settings";
  }
  const size_t size = size_t(4608) * kMiB;  // 4.5 GiB
  if (device_->info().max_buffer_size < size) {
    GTEST_SKIP() << "this device's buffers stop at " << (device_->info().max_buffer_size >> 20)
                 << " MiB";
  }
  std::unique_ptr<mb::Heap> h = device_->create_heap(size);
  if (h == nullptr) GTEST_SKIP() << "the driver refused a 4.5 GiB heap";
  ASSERT_NE(h->host_ptr(), nullptr);
  uint8_t* p = bytes(*h);
  struct Range {
    size_t at, n;
  };
  const Range fill{3900 * kMiB + 3, 200 * kMiB + 5};   // 3900 MiB .. 4100 MiB
  const Range src{3000 * kMiB + 17, 400 * kMiB + 13};  // copied to dst (agree mod 16)
  const Range dst{4150 * kMiB + 1, src.n};
  const Range dst4{3700 * kMiB + 8, 300 * kMiB};  // agrees with src.at + 3 mod 4 only
  const Range rnd{3950 * kMiB + 16, 100 * kMiB};
  const size_t guard = 4096;
  for (const Range& r : {fill, src, dst, dst4, rnd}) {
    std::memset(p + r.at - guard, kGuard, r.n + 2 * guard);
  }
  random_bytes(p + src.at, src.n, 9);
  std::vector<uint8_t> want_src(p + src.at, p + src.at + src.n);
  RandomParams rp;
  rp.count = rnd.n;
  rp.seed = 77;
  rp.offset = (uint64_t(1) << 32) - 1000;  // the block counter carries into its high word
  rp.op = RandomOp::IntRange;
  rp.dtype = RandomDType::U8;
  rp.range = 256;
  std::unique_ptr<mb::CommandBuffer> cb = queue_->create_command_buffer();
  cb->copy({h.get(), src.at}, {h.get(), dst.at}, src.n);
  cb->copy({h.get(), src.at + 3}, {h.get(), dst4.at}, dst4.n);
  cb->fill({h.get(), fill.at}, fill.n, kPattern, 8);  // after the copies: overwrites dst4's end
  cb->random({h.get(), rnd.at}, rp);
  run(std::move(cb));
  std::vector<uint8_t> want(rnd.n);
  mpsrt::cpu::random_scalar(want.data(), rp, 0, rnd.n);
  // The random range lies inside the fill's: check it first, then the fill around it.
  EXPECT_TRUE(bytes_equal(p + rnd.at, want.data(), rnd.n));
  std::vector<uint8_t> ref(fill.n);
  ref_fill(ref.data(), fill.n, kPattern, 8);
  const size_t r0 = rnd.at - fill.at, r1 = r0 + rnd.n;
  EXPECT_TRUE(bytes_equal(p + fill.at, ref.data(), r0));
  EXPECT_TRUE(bytes_equal(p + fill.at + r1, ref.data() + r1, fill.n - r1));
  EXPECT_TRUE(bytes_equal(p + dst.at, want_src.data(), dst.n));
  // dst4: the copy up to where the fill began.
  EXPECT_TRUE(bytes_equal(p + dst4.at, want_src.data() + 3, fill.at - dst4.at));
  for (size_t i = 0; i < guard; ++i) {
    ASSERT_EQ(p[fill.at + fill.n + i], kGuard) << i;
    ASSERT_EQ(p[dst.at - 1 - i], kGuard) << i;
    ASSERT_EQ(p[dst.at + dst.n + i], kGuard) << i;
    ASSERT_EQ(p[dst4.at - 1 - i], kGuard) << i;
  }
  // Then a copy whose offsets disagree mod 4 (the transfer path on vulkan), from below 4 GiB
  // to across it, and a 1-byte fill past its end.
  const Range odd{3960 * kMiB + 6, 200 * kMiB + 3};
  const Range tail{odd.at + odd.n, 100 * kMiB + 1};
  std::memset(p + tail.at, kGuard, tail.n + guard);
  cb = queue_->create_command_buffer();
  cb->copy({h.get(), src.at + 1}, {h.get(), odd.at}, odd.n);
  cb->fill({h.get(), tail.at}, tail.n, 0x5A, 1);
  run(std::move(cb));
  EXPECT_TRUE(bytes_equal(p + odd.at, want_src.data() + 1, odd.n));
  std::vector<uint8_t> ones(tail.n, 0x5A);
  EXPECT_TRUE(bytes_equal(p + tail.at, ones.data(), tail.n));
  for (size_t i = 0; i < guard; ++i) ASSERT_EQ(p[tail.at + tail.n + i], kGuard) << i;
}

std::string variant_name(const ::testing::TestParamInfo<Variant>& p) {
  return p.param.name;
}

INSTANTIATE_TEST_SUITE_P(Available, KernelShapes, ::testing::ValuesIn(variants()), variant_name);

}  // namespace
