// Bad input to every public C++ call (mpsrt/*.h), on every built and available backend: the
// C++ counterpart of tests/python/test_bad_input.py. Each row makes one call with a bad
// argument and expects std::invalid_argument with a given part of the message (the Python
// layer's words where Python raises the same error through these calls). After every row the
// runtime must still work (allocate, fill, synchronize, read back) and nothing may leak (the
// allocated bytes are back to their value before the row). A last group checks that refused
// calls on a Buffer leave its neighbours in the same heap untouched, byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime.h"
#include "mpsrt/mpsrt.h"
#include "mpsrt/philox.h"

namespace {

using Env = std::map<std::string, std::string>;
using mpsrt::Buffer;
using mpsrt::Generator;
using mpsrt::RandomSpec;
using mpsrt::Stream;
using mpsrt::detail::Runtime;
using Op = RandomSpec::Op;
using DType = RandomSpec::DType;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// What the rows call methods on; made fresh for each row on the backend under test.
struct Ctx {
  Stream s = mpsrt::default_stream(0);
  Buffer u8{64, s};   // 64 x uint8
  Buffer u32{64, s};  // 16 x uint32 (or float32, int32)
  Buffer f64{16, s};  // 2 x float64
  Buffer empty;       // never allocated
  Buffer released{64, s};
  Generator gen{0};
  Generator moved{0};
  int n = mpsrt::device_count();

  Ctx() {
    released.reset();
    Generator taken(std::move(moved));
    (void)taken;
  }
};

RandomSpec spec(Op op, DType dt) {
  RandomSpec r;
  r.op = op;
  r.dtype = dt;
  return r;
}

struct Row {
  std::string id;
  std::function<void(Ctx&)> call;
  std::string match;  // a literal part of the message
  bool needs_two_devices = false;
};

// One random_fill of `count` elements with `r` on c.u32 (64 bytes).
std::function<void(Ctx&)> fill_u32(RandomSpec r, uint64_t count = 4) {
  return [r, count](Ctx& c) { mpsrt::random_fill(c.u32, count, r, c.gen, c.s); };
}

std::vector<Row> rows() {
  std::vector<Row> v;
  auto add = [&v](std::string id, std::function<void(Ctx&)> call, std::string match,
                  bool two = false) {
    v.push_back({std::move(id), std::move(call), std::move(match), two});
  };

  // ------------------------------------------------------------ random_fill: counts
  add("random_fill-count-one-past-the-end", fill_u32(spec(Op::Bits, DType::U32), 17),
      "[random] random_fill: 17 elements of uint32 need more than the buffer's 64 bytes; pass "
      "count <= 16");
  add("random_fill-count-2**62", fill_u32(spec(Op::Bits, DType::U32), uint64_t(1) << 62),
      "need more than the buffer's 64 bytes");
  add("random_fill-count-max", fill_u32(spec(Op::Uniform, DType::F64), kU64Max),
      "elements of float64 need more than the buffer's 64 bytes; pass count <= 8");
  add(
      "random_fill-count-float64-past-the-end",
      [](Ctx& c) { mpsrt::random_fill(c.f64, 3, spec(Op::Normal, DType::F64), c.gen, c.s); },
      "3 elements of float64 need more than the buffer's 16 bytes; pass count <= 2");
  add(
      "random_fill-empty-buffer",
      [](Ctx& c) { mpsrt::random_fill(c.empty, 1, spec(Op::Bits, DType::U32), c.gen, c.s); },
      "[random] the buffer is empty or released");
  add(
      "random_fill-released-buffer",
      [](Ctx& c) { mpsrt::random_fill(c.released, 1, spec(Op::Bits, DType::U32), c.gen, c.s); },
      "[random] the buffer is empty or released");
  add(
      "random_fill-moved-generator",
      [](Ctx& c) { mpsrt::random_fill(c.u32, 1, spec(Op::Bits, DType::U32), c.moved, c.s); },
      "[random] the Generator is empty (moved from)");
  add(
      "random_fill-empty-stream",
      [](Ctx& c) {
        mpsrt::random_fill(c.u32, 1, spec(Op::Bits, DType::U32), c.gen, Stream::from_handle(0));
      },
      "[stream] the Stream is empty");

  // ------------------------------------------------------------ random_fill: op and dtype
  add("random_fill-uniform-int32", fill_u32(spec(Op::Uniform, DType::I32)),
      "[random] random_fill: the uniform op cannot write int32; it writes float16, bfloat16, "
      "float32, float64");
  add("random_fill-normal-uint8", fill_u32(spec(Op::Normal, DType::U8)),
      "the normal op cannot write uint8");
  add("random_fill-bits-float32", fill_u32(spec(Op::Bits, DType::F32)),
      "the bits op cannot write float32; it writes uint32");
  add("random_fill-bernoulli-uint32", fill_u32(spec(Op::Bernoulli, DType::U32)),
      "the bernoulli op cannot write uint32; it writes uint8, int32, int64, float16, bfloat16, "
      "float32, float64, bool, int8, int16");
  // Still refused, as torch refuses them (its bernoulli_ has no uint16/uint64 kernel; uniform_
  // and normal_ are floating-point only).
  add("random_fill-bernoulli-uint16", fill_u32(spec(Op::Bernoulli, DType::U16)),
      "the bernoulli op cannot write uint16");
  add("random_fill-bernoulli-uint64", fill_u32(spec(Op::Bernoulli, DType::U64)),
      "the bernoulli op cannot write uint64");
  add("random_fill-uniform-int8", fill_u32(spec(Op::Uniform, DType::I8)),
      "the uniform op cannot write int8");
  add("random_fill-normal-int16", fill_u32(spec(Op::Normal, DType::I16)),
      "the normal op cannot write int16");
  add("random_fill-bits-uint64", fill_u32(spec(Op::Bits, DType::U64)),
      "the bits op cannot write uint64; it writes uint32");
  add("random_fill-op-5", fill_u32(spec(static_cast<Op>(5), DType::U32)),
      "[random] random_fill: invalid op 5; expected a RandomSpec::Op");
  add("random_fill-op-255", fill_u32(spec(static_cast<Op>(255), DType::U32)), "invalid op 255");
  add("random_fill-dtype-13", fill_u32(spec(Op::Bernoulli, static_cast<DType>(13))),
      "[random] random_fill: invalid dtype 13; expected a RandomSpec::DType");
  add("random_fill-dtype-200", fill_u32(spec(Op::Bits, static_cast<DType>(200))),
      "invalid dtype 200");

  // ------------------------------------------------------------ random_fill: values
  auto with = [](Op op, DType dt, const std::function<void(RandomSpec&)>& set) {
    RandomSpec r = spec(op, dt);
    set(r);
    return r;
  };
  add("random_fill-uniform-low-nan",
      fill_u32(with(Op::Uniform, DType::F32, [](RandomSpec& r) { r.a = kNaN; })),
      "uniform_(): low must be finite, got nan");
  add("random_fill-uniform-high-inf",
      fill_u32(with(Op::Uniform, DType::F32, [](RandomSpec& r) { r.b = kInf; })),
      "uniform_(): high must be finite, got inf");
  add("random_fill-uniform-reversed",
      fill_u32(with(Op::Uniform, DType::F32,
                    [](RandomSpec& r) {
                      r.a = 1;
                      r.b = 0;
                    })),
      "uniform_(): expected low <= high, got low=1.0, high=0.0");
  add("random_fill-normal-mean-nan",
      fill_u32(with(Op::Normal, DType::F32, [](RandomSpec& r) { r.a = kNaN; })),
      "normal_(): mean must be finite, got nan");
  add("random_fill-normal-std-minus-inf",
      fill_u32(with(Op::Normal, DType::F32, [](RandomSpec& r) { r.b = -kInf; })),
      "normal_(): std must be finite, got -inf");
  add("random_fill-normal-std-negative",
      fill_u32(with(Op::Normal, DType::F32, [](RandomSpec& r) { r.b = -1e-7; })),
      "normal_(): std must be >= 0, got -1e-07");
  add("random_fill-int-empty-range",
      fill_u32(with(Op::IntRange, DType::I32,
                    [](RandomSpec& r) {
                      r.low = 5;
                      r.range = 0;
                    })),
      "random_(): expected low < high, got low=5, high=5");
  add("random_fill-int-too-wide-uint8",
      fill_u32(with(Op::IntRange, DType::U8, [](RandomSpec& r) { r.range = 300; })),
      "random_(): [0, 300) does not fit in uint8 ([0, 256))");
  // IntRange into the dtypes torch's random_ added: each one's bound.
  add("random_fill-int-float16-2**11+1",
      fill_u32(with(Op::IntRange, DType::F16, [](RandomSpec& r) { r.range = 2050; })),
      "random_(): [0, 2050) does not fit in float16 ([-2048, 2049)); a float16 holds the "
      "integers of that range exactly");
  add("random_fill-int-bfloat16-below",
      fill_u32(with(Op::IntRange, DType::BF16, [](RandomSpec& r) { r.low = -257; })),
      "random_(): [-257, -256) does not fit in bfloat16 ([-256, 257))");
  add("random_fill-int-float32-2**24+1",
      fill_u32(with(Op::IntRange, DType::F32, [](RandomSpec& r) { r.low = (1 << 24) + 1; })),
      "random_(): [16777217, 16777218) does not fit in float32 ([-16777216, 16777217))");
  add("random_fill-int-float64-2**53+1",
      fill_u32(
          with(Op::IntRange, DType::F64, [](RandomSpec& r) { r.range = (uint64_t(1) << 53) + 2; })),
      "does not fit in float64 ([-9007199254740992, 9007199254740993))");
  add("random_fill-int-bool-3",
      fill_u32(with(Op::IntRange, DType::Bool, [](RandomSpec& r) { r.range = 3; })),
      "random_(): [0, 3) does not fit in bool ([0, 2))");
  add("random_fill-int-int8-128",
      fill_u32(with(Op::IntRange, DType::I8, [](RandomSpec& r) { r.range = 129; })),
      "random_(): [0, 129) does not fit in int8 ([-128, 128))");
  add("random_fill-int-int16-below",
      fill_u32(with(Op::IntRange, DType::I16, [](RandomSpec& r) { r.low = -32769; })),
      "random_(): [-32769, -32768) does not fit in int16 ([-32768, 32768))");
  add("random_fill-int-uint16-negative",
      fill_u32(with(Op::IntRange, DType::U16, [](RandomSpec& r) { r.low = -1; })),
      "random_(): [-1, 0) does not fit in uint16 ([0, 65536))");
  add("random_fill-int-uint64-2**63",
      fill_u32(with(Op::IntRange, DType::U64,
                    [](RandomSpec& r) {
                      r.low = INT64_MAX;
                      r.range = 2;
                    })),
      "does not fit in uint64 ([0, 9223372036854775808))");
  add("random_fill-int-negative-uint8",
      fill_u32(with(Op::IntRange, DType::U8, [](RandomSpec& r) { r.low = -1; })),
      "random_(): [-1, 0) does not fit in uint8 ([0, 256))");
  add("random_fill-int-below-int32",
      fill_u32(
          with(Op::IntRange, DType::I32, [](RandomSpec& r) { r.low = -(int64_t(1) << 31) - 1; })),
      "random_(): [-2147483649, -2147483648) does not fit in int32 ([-2147483648, 2147483648))");
  add("random_fill-int-past-int64",
      fill_u32(with(Op::IntRange, DType::I64,
                    [](RandomSpec& r) {
                      r.low = kI64Max;
                      r.range = 2;
                    })),
      "random_(): [9223372036854775807, 9223372036854775809) does not fit in int64 "
      "([-9223372036854775808, 9223372036854775808))");
  add("random_fill-int-range-max",
      fill_u32(with(Op::IntRange, DType::I64,
                    [](RandomSpec& r) {
                      r.low = 0;
                      r.range = kU64Max;
                    })),
      "[0, 18446744073709551615) does not fit in int64");
  add("random_fill-bernoulli-p-2",
      fill_u32(with(Op::Bernoulli, DType::F32, [](RandomSpec& r) { r.p = 2; })),
      "bernoulli_(): p must be in [0, 1], got 2.0");
  add("random_fill-bernoulli-p-negative",
      fill_u32(with(Op::Bernoulli, DType::Bool, [](RandomSpec& r) { r.p = -0.5; })),
      "bernoulli_(): p must be in [0, 1], got -0.5");
  add("random_fill-bernoulli-p-nan",
      fill_u32(with(Op::Bernoulli, DType::U8, [](RandomSpec& r) { r.p = kNaN; })),
      "bernoulli_(): p must be finite, got nan");
  add("random_fill-bernoulli-p-inf",
      fill_u32(with(Op::Bernoulli, DType::F64, [](RandomSpec& r) { r.p = kInf; })),
      "bernoulli_(): p must be finite, got inf");
  add("random_fill-bad-spec-count-0",
      fill_u32(with(Op::Bernoulli, DType::F32, [](RandomSpec& r) { r.p = 1e300; }), 0),
      "bernoulli_(): p must be in [0, 1], got 1e+300");
  add(
      "random_fill-bad-spec-on-empty-buffer",
      [](Ctx& c) {
        RandomSpec r = spec(Op::Uniform, DType::F32);
        r.a = kNaN;
        mpsrt::random_fill(c.empty, 0, r, c.gen, c.s);
      },
      "uniform_(): low must be finite, got nan");
  add(
      "random_fill-generator-other-device",
      [](Ctx& c) {
        Generator g1(1);
        mpsrt::random_fill(c.u32, 1, spec(Op::Uniform, DType::F32), g1, c.s);
      },
      "uniform_(): the generator is on device 1 but the buffer on device 0", true);
  add(
      "random_fill-stream-other-device",
      [](Ctx& c) {
        mpsrt::random_fill(c.u32, 1, spec(Op::Bits, DType::U32), c.gen, mpsrt::default_stream(1));
      },
      "[random] the buffer (device 0), the generator (device 0) and the stream (device 1) must be "
      "on one device",
      true);

  // ------------------------------------------------------------ Buffer
  for (unsigned size : {0u, 3u, 5u, 16u}) {
    add(
        "fill-pattern-size-" + std::to_string(size), [size](Ctx& c) { c.u8.fill(0, size, c.s); },
        "[buffer] fill: pattern size must be 1, 2, 4 or 8 bytes, got " + std::to_string(size));
  }
  add(
      "fill-empty-stream", [](Ctx& c) { c.u8.fill(1, 1, Stream::from_handle(0)); },
      "[stream] the Stream is empty");
  add(
      "fill-stream-other-device", [](Ctx& c) { c.u8.fill(1, 1, mpsrt::default_stream(1)); },
      "[buffer] fill: the stream is on device 1 but the buffer on device 0", true);
  add(
      "copy_from-size-mismatch", [](Ctx& c) { c.u8.copy_from(c.f64, c.s); },
      "[buffer] copy_: the source has 16 bytes but the destination 64; sizes must match");
  add(
      "copy_from-released-source", [](Ctx& c) { c.u8.copy_from(c.released, c.s); },
      "the source has 0 bytes but the destination 64");
  add(
      "copy_from-into-empty", [](Ctx& c) { c.empty.copy_from(c.u8, c.s); },
      "the source has 64 bytes but the destination 0");
  add(
      "copy_from-empty-stream", [](Ctx& c) { c.u8.copy_from(c.u32, Stream::from_handle(0)); },
      "[stream] the Stream is empty");
  add(
      "copy_from-stream-other-device",
      [](Ctx& c) { c.u8.copy_from(c.u32, mpsrt::default_stream(1)); },
      "[buffer] copy_: the stream is on device 1 but the destination buffer on device 0; use a "
      "stream of the destination's device",
      true);
  add(
      "copy_from-other-device-stream-of-source",
      [](Ctx& c) {
        Buffer other(64, mpsrt::default_stream(1));
        c.u8.copy_from(other, mpsrt::default_stream(1));
      },
      "the stream is on device 1 but the destination buffer on device 0", true);
  add(
      "copy_from_host-size-mismatch",
      [](Ctx& c) {
        std::vector<uint8_t> host(10);
        c.u8.copy_from_host(host.data(), host.size());
      },
      "[buffer] copy_from_host: the source has 10 bytes but the buffer 64; sizes must match");
  add(
      "copy_from_host-too-long",
      [](Ctx& c) {
        std::vector<uint8_t> host(65);
        c.u8.copy_from_host(host.data(), host.size());
      },
      "the source has 65 bytes but the buffer 64");
  add(
      "copy_from_host-null", [](Ctx& c) { c.u8.copy_from_host(nullptr, 64); },
      "[buffer] copy_from_host: the source is a null pointer for 64 bytes");
  add(
      "record_stream-other-device", [](Ctx& c) { c.u8.record_stream(mpsrt::default_stream(1)); },
      "[allocator] record_stream: the stream is on device 1 but the buffer on device 0", true);
  add(
      "record_stream-empty-stream", [](Ctx& c) { c.u8.record_stream(Stream::from_handle(0)); },
      "[stream] the Stream is empty");
  add(
      "Buffer-empty-stream", [](Ctx&) { Buffer b(64, Stream::from_handle(0)); },
      "[stream] the Stream is empty");

  // ------------------------------------------------------------ Buffer::view (Python: ValueError)
  add(
      "view-past-the-end", [](Ctx& c) { (void)c.u8.view(60, 8); },
      "[buffer] view: bytes [60, 60 + 8) are outside the buffer's 64 bytes; a view must lie "
      "within [0, 64)");
  add(
      "view-offset-past-the-end", [](Ctx& c) { (void)c.u8.view(65, 0); },
      "bytes [65, 65 + 0) are outside the buffer's 64 bytes");
  add(
      "view-size-overflow", [](Ctx& c) { (void)c.u8.view(8, kU64Max); },
      "bytes [8, 8 + 18446744073709551615) are outside the buffer's 64 bytes");
  add(
      "view-of-a-view-past-its-end",
      [](Ctx& c) {
        Buffer part = c.u8.view(16, 16);
        (void)part.view(8, 9);  // inside the base, outside the view
      },
      "bytes [8, 8 + 9) are outside the buffer's 16 bytes; a view must lie within [0, 16)");
  add(
      "view-of-an-empty-buffer", [](Ctx& c) { (void)c.empty.view(0, 1); },
      "bytes [0, 0 + 1) are outside the buffer's 0 bytes");
  add(
      "view-of-a-released-buffer", [](Ctx& c) { (void)c.released.view(0, 1); },
      "bytes [0, 0 + 1) are outside the buffer's 0 bytes");
  add(
      "view-fill-pattern-size", [](Ctx& c) { c.u8.view(8, 8).fill(0, 3, c.s); },
      "[buffer] fill: pattern size must be 1, 2, 4 or 8 bytes, got 3");
  add(
      "view-copy_from-size-mismatch", [](Ctx& c) { c.u8.view(0, 8).copy_from(c.u8, c.s); },
      "[buffer] copy_: the source has 64 bytes but the destination 8; sizes must match");
  add(
      "view-random_fill-past-the-view",
      [](Ctx& c) {
        Buffer part = c.u32.view(32, 32);
        mpsrt::random_fill(part, 9, spec(Op::Bits, DType::U32), c.gen, c.s);
      },
      "9 elements of uint32 need more than the buffer's 32 bytes; pass count <= 8");
  add(
      "view-record_stream-other-device",
      [](Ctx& c) { c.u8.view(8, 8).record_stream(mpsrt::default_stream(1)); },
      "[allocator] record_stream: the stream is on device 1 but the buffer on device 0", true);

  // ------------------------------------------------------------ Generator
  for (size_t size : {size_t(0), size_t(43), size_t(45)}) {
    add(
        "set_state-" + std::to_string(size),
        [size](Ctx& c) {
          std::vector<uint8_t> blob(64);
          c.gen.set_state(blob.data(), size);
        },
        "[random] set_rng_state: the state must be 44 bytes, got " + std::to_string(size));
  }
  add(
      "set_state-null", [](Ctx& c) { c.gen.set_state(nullptr, mpsrt::kRngStateSize); },
      "[random] set_rng_state: the state is a null pointer");
  add(
      "moved-generator-manual_seed", [](Ctx& c) { c.moved.manual_seed(1); },
      "[random] the Generator is empty (moved from)");
  add(
      "moved-generator-set_offset", [](Ctx& c) { c.moved.set_offset(1); },
      "the Generator is empty");
  add(
      "moved-generator-get_state", [](Ctx& c) { (void)c.moved.get_state(); },
      "the Generator is empty");
  add(
      "moved-generator-clone_state", [](Ctx& c) { (void)c.moved.clone_state(); },
      "[random] the Generator is empty (moved from)");

  // ------------------------------------------------------------ device indices
  const std::vector<std::pair<std::string, std::function<void(int)>>> device_calls = {
      {"set_device", [](int d) { mpsrt::set_device(d); }},
      {"get_device_properties", [](int d) { mpsrt::get_device_properties(d); }},
      {"synchronize", [](int d) { mpsrt::synchronize(d); }},
      {"driver_allocated_memory", [](int d) { mpsrt::driver_allocated_memory(d); }},
      {"default_stream", [](int d) { mpsrt::default_stream(d); }},
      {"current_stream", [](int d) { mpsrt::current_stream(d); }},
      {"stream_from_pool", [](int d) { mpsrt::stream_from_pool(0, d); }},
      {"Generator", [](int d) { Generator g(d); }},
      {"default_generator", [](int d) { Generator::default_generator(d); }},
      {"memory_stats", [](int d) { mpsrt::memory_stats(d); }},
      {"reset_peak_memory_stats", [](int d) { mpsrt::reset_peak_memory_stats(d); }},
      {"current_allocated_memory", [](int d) { mpsrt::current_allocated_memory(d); }},
      {"reserved_memory", [](int d) { mpsrt::reserved_memory(d); }},
      {"recommended_max_memory", [](int d) { mpsrt::recommended_max_memory(d); }},
      {"empty_cache", [](int d) { mpsrt::empty_cache(d); }},
      {"set_per_process_memory_fraction",
       [](int d) { mpsrt::set_per_process_memory_fraction(0.5, d); }},
      {"set_cache_limit", [](int d) { mpsrt::set_cache_limit(0, d); }},
      {"add_reclaim_callback",
       [](int d) { mpsrt::add_reclaim_callback([](size_t) { return false; }, d); }},
      {"remove_reclaim_callback", [](int d) { mpsrt::remove_reclaim_callback(0, d); }},
      {"record_memory_history", [](int d) { mpsrt::record_memory_history(false, 0, nullptr, d); }},
      {"memory_snapshot", [](int d) { mpsrt::memory_snapshot(d); }},
      {"get_per_process_memory_fraction", [](int d) { mpsrt::get_per_process_memory_fraction(d); }},
      {"reset_accumulated_memory_stats", [](int d) { mpsrt::reset_accumulated_memory_stats(d); }},
      {"mem_get_info", [](int d) { mpsrt::mem_get_info(d); }},
      {"record_memory_history-options",
       [](int d) { mpsrt::record_memory_history(true, mpsrt::HistoryOptions{}, d); }},
  };
  {
    mpsrt::HistoryOptions bad;
    bad.skip_actions = {"alloc", "allocate"};
    add(
        "record_memory_history-skip-unknown",
        [bad](Ctx&) { mpsrt::record_memory_history(true, bad, 0); },
        "[allocator] skip_actions: unknown action 'allocate'; expected alloc, free_requested");
    mpsrt::HistoryOptions ctx;
    ctx.context = static_cast<mpsrt::HistoryContext>(9);
    add(
        "record_memory_history-context-9",
        [ctx](Ctx&) { mpsrt::record_memory_history(true, ctx, 0); },
        "[allocator] record_memory_history: context 9 is out of range");
  }
  for (const auto& [name, fn] : device_calls) {
    add(
        name + "-device-count", [fn = fn](Ctx& c) { fn(c.n); }, "[device] invalid device index ");
    add(
        name + "-device--7", [fn = fn](Ctx&) { fn(-7); },
        "[device] invalid device index -7: expected 0 <= index < ");
    add(
        name + "-device-int-max", [fn = fn](Ctx&) { fn(std::numeric_limits<int>::max()); },
        "invalid device index 2147483647");
  }

  // ------------------------------------------------------------ streams and events
  add(
      "commit-sync-type-5", [](Ctx& c) { c.s.commit(static_cast<mpsrt::SyncType>(5)); },
      "[stream] commit: invalid SyncType 5");
  add(
      "commit-sync-type--1", [](Ctx& c) { c.s.commit(static_cast<mpsrt::SyncType>(-1)); },
      "[stream] commit: invalid SyncType -1");
  add(
      "commit-empty-stream", [](Ctx&) { Stream::from_handle(0).commit(mpsrt::SyncType::Commit); },
      "[stream] the Stream is empty");
  add(
      "synchronize-empty-stream", [](Ctx&) { Stream::from_handle(0).synchronize(); },
      "[stream] the Stream is empty");
  add(
      "query-empty-stream", [](Ctx&) { Stream::from_handle(0).query(); },
      "[stream] the Stream is empty");
  add(
      "set_current_stream-empty", [](Ctx&) { mpsrt::set_current_stream(Stream::from_handle(0)); },
      "[stream] the Stream is empty");
  add(
      "wait_stream-empty", [](Ctx& c) { c.s.wait_stream(Stream::from_handle(0)); },
      "[stream] the Stream is empty");
  add(
      "add_callback-empty", [](Ctx& c) { c.s.add_callback(nullptr); },
      "[stream] add_callback: the callback is empty");
  add(
      "Event-record-empty-stream",
      [](Ctx&) {
        mpsrt::Event e;
        e.record(Stream::from_handle(0));
      },
      "[stream] the Stream is empty");
  add(
      "Event-wait-empty-stream",
      [](Ctx& c) {
        mpsrt::Event e;
        e.record(c.s);
        e.wait(Stream::from_handle(0));
      },
      "[stream] the Stream is empty");
  add(
      "Event-record-other-device",
      [](Ctx& c) {
        mpsrt::Event e;
        e.record(c.s);
        e.record(mpsrt::default_stream(1));
      },
      "[event] record: the event belongs to device 0 but the stream to device 1", true);
  add(
      "Event-elapsed-no-timing",
      [](Ctx& c) {
        mpsrt::Event a, b;
        a.record(c.s);
        b.record(c.s);
        b.synchronize();
        a.elapsed_time(b);
      },
      "[event] elapsed_time: Both events must be created with argument 'enable_timing=True'");
  add(
      "Event-elapsed-not-recorded",
      [](Ctx&) {
        mpsrt::Event a(true), b(true);
        a.elapsed_time(b);
      },
      "[event] elapsed_time: Both events must be recorded before calculating elapsed time");

  // ------------------------------------------------------------ memory settings
  for (double f : {-0.5, 2.5, kNaN, kInf, -kInf, 2.0000000000000004}) {
    const std::string text = std::isnan(f)   ? "nan"
                             : std::isinf(f) ? (f > 0 ? "inf" : "-inf")
                             : f == -0.5     ? "-0.5"
                             : f == 2.5      ? "2.5"
                                             : "2.0000000000000004";
    add(
        "set_per_process_memory_fraction-" + text,
        [f](Ctx&) { mpsrt::set_per_process_memory_fraction(f, 0); },
        "Invalid fraction value: " + text + ". Allowed range: 0~2");
  }
  add(
      "add_reclaim_callback-empty", [](Ctx&) { mpsrt::add_reclaim_callback(nullptr, 0); },
      "[allocator] add_reclaim_callback: the callback is empty");
  add(
      "remove_reclaim_callback-unknown", [](Ctx&) { mpsrt::remove_reclaim_callback(12345, 0); },
      "[allocator] no reclaim callback with id 12345");

  // ------------------------------------------------------------ profiler
  for (unsigned modes : {0u, 4u, 7u}) {
    add(
        "profiler-start-modes-" + std::to_string(modes),
        [modes](Ctx&) { mpsrt::profiler::start(modes); },
        "[profiler] start: modes must combine kInterval (1) and kEvent (2), got " +
            std::to_string(modes));
  }
  for (int64_t id : {int64_t{0}, int64_t{-1}, int64_t{987654321}}) {
    add(
        "profiler-range_end-" + std::to_string(id), [id](Ctx&) { mpsrt::profiler::range_end(id); },
        "[profiler] range_end: no range with id " + std::to_string(id) +
            " is open; pass an id that range_start() returned, once");
  }
  return v;
}

class BadInputTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // Two cpu devices, so that the cross-device rows run there; other backends have theirs.
    Env env = {{"MPSRT_BACKEND", GetParam()}, {"MPSRT_CPU_DEVICES", "2"}};
    const mpsrt::detail::EnvLookup lookup = [&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
  }
  void TearDown() override { Runtime::reset(nullptr); }

  // The runtime still works: allocate, fill, synchronize, read back.
  static void expect_usable() {
    Stream s = mpsrt::default_stream(0);
    Buffer b(256, s);
    b.fill(0xA5, 1, s);
    RandomSpec r;
    Generator g(0);
    mpsrt::random_fill(b, 8, r, g, s);
    mpsrt::synchronize(0);
    const auto* p = static_cast<const uint8_t*>(b.host_ptr());
    if (p != nullptr) {
      for (size_t i = 32; i < 256; ++i) ASSERT_EQ(p[i], 0xA5) << "byte " << i;
    }
  }
};

TEST_P(BadInputTest, EveryRowRaisesInvalidArgumentAndLeavesTheRuntimeUsable) {
  const double fraction = mpsrt::set_per_process_memory_fraction(0.0, 0);
  mpsrt::set_per_process_memory_fraction(fraction, 0);
  int ran = 0;
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.id);
    if (row.needs_two_devices && mpsrt::device_count() < 2) continue;
    mpsrt::synchronize(0);
    const uint64_t before = mpsrt::current_allocated_memory(0);
    {
      Ctx c;
      const uint64_t with_ctx = mpsrt::current_allocated_memory(0);
      try {
        row.call(c);
        ADD_FAILURE() << row.id << ": no exception";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(row.match), std::string::npos)
            << row.id << ": message \"" << e.what() << "\" lacks \"" << row.match << "\"";
      } catch (const std::exception& e) {
        ADD_FAILURE() << row.id << ": not std::invalid_argument but \"" << e.what() << "\"";
      }
      mpsrt::synchronize(0);
      EXPECT_EQ(mpsrt::current_allocated_memory(0), with_ctx) << row.id << " leaked";
    }
    mpsrt::synchronize(0);
    EXPECT_EQ(mpsrt::current_allocated_memory(0), before) << row.id << " leaked";
    EXPECT_EQ(mpsrt::current_device(), 0) << row.id << " changed the current device";
    EXPECT_EQ(mpsrt::current_stream(0), mpsrt::default_stream(0))
        << row.id << " changed the current stream";
    EXPECT_EQ(mpsrt::set_per_process_memory_fraction(fraction, 0), fraction)
        << row.id << " changed the memory fraction";
    expect_usable();
    ++ran;
  }
  EXPECT_GT(ran, 100);
}

TEST_P(BadInputTest, RandomSupportedIsTheRuleTheCoreEnforces) {
  Stream s = mpsrt::default_stream(0);
  Buffer b(64, s);
  Generator g(0);
  for (int op = 0; op < 7; ++op) {
    for (int dt = 0; dt < 15; ++dt) {
      SCOPED_TRACE("op " + std::to_string(op) + " dtype " + std::to_string(dt));
      const RandomSpec r = spec(static_cast<Op>(op), static_cast<DType>(dt));
      const bool ok = mpsrt::random_supported(r.op, r.dtype);
      EXPECT_EQ(ok, mpsrt::random_op_name(r.op) != nullptr &&
                        mpsrt::dtype_name(r.dtype) != nullptr && (op != 0 || dt == 3) &&
                        ((op != 1 && op != 2) || (dt >= 4 && dt <= 7)) &&
                        (op != 4 || (dt != 3 && dt != 11 && dt != 12)));
      if (ok) {
        EXPECT_NO_THROW(mpsrt::random_fill(b, 8, r, g, s));
      } else {
        EXPECT_THROW(mpsrt::random_fill(b, 8, r, g, s), std::invalid_argument);
      }
    }
  }
  mpsrt::synchronize(0);
}

// ---------------------------------------------------------------- neighbouring Buffers

class NeighbourTest : public BadInputTest {
 protected:
  static constexpr size_t kSize = 512;  // one small-pool block: A, B and C lie back to back
  static constexpr uint8_t kGuard = 0x5A;

  void SetUp() override {
    BadInputTest::SetUp();
    s_ = mpsrt::default_stream(0);
    a_ = Buffer(kSize, s_);
    b_ = Buffer(kSize, s_);
    c_ = Buffer(kSize, s_);
    ASSERT_EQ(b_.address(), a_.address() + kSize) << "A and B are not adjacent";
    ASSERT_EQ(c_.address(), b_.address() + kSize) << "B and C are not adjacent";
    if (a_.host_ptr() == nullptr) GTEST_SKIP() << "the device's memory is not host-visible";
    a_.fill(kGuard, 1, s_);
    b_.fill(0, 1, s_);
    c_.fill(kGuard, 1, s_);
    mpsrt::synchronize(0);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    c_.reset();
    BadInputTest::TearDown();
  }

  void expect_untouched(bool b_too = true) {
    mpsrt::synchronize(0);
    for (const Buffer* x : {&a_, &c_}) {
      const auto* p = static_cast<const uint8_t*>(x->host_ptr());
      for (size_t i = 0; i < kSize; ++i) {
        ASSERT_EQ(p[i], kGuard) << (x == &a_ ? "A" : "C") << " byte " << i << " changed";
      }
    }
    if (b_too) {
      const auto* p = static_cast<const uint8_t*>(b_.host_ptr());
      for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(p[i], 0) << "B byte " << i << " changed";
    }
  }

  Stream s_ = Stream::from_handle(0);
  Buffer a_, b_, c_;
};

TEST_P(NeighbourTest, RandomFillPastTheEndIsRefusedAndWritesNothing) {
  Generator g(0);
  const std::vector<RandomSpec> specs = {
      spec(Op::Bits, DType::U32),       spec(Op::Uniform, DType::F32),
      spec(Op::Uniform, DType::F64),    spec(Op::Normal, DType::F16),
      spec(Op::IntRange, DType::I64),   spec(Op::IntRange, DType::U8),
      spec(Op::Bernoulli, DType::Bool), spec(Op::Bernoulli, DType::F64),
  };
  for (const RandomSpec& r : specs) {
    const uint64_t elem = r.dtype == DType::U8 || r.dtype == DType::Bool    ? 1
                          : r.dtype == DType::F16 || r.dtype == DType::BF16 ? 2
                          : r.dtype == DType::F64 || r.dtype == DType::I64  ? 8
                                                                            : 4;
    for (uint64_t count : {kSize / elem + 1, kSize / elem * 2, uint64_t(1) << 40, kU64Max}) {
      SCOPED_TRACE(std::string(mpsrt::random_op_name(r.op)) + " " + mpsrt::dtype_name(r.dtype) +
                   " count " + std::to_string(count));
      EXPECT_THROW(mpsrt::random_fill(b_, count, r, g, s_), std::invalid_argument);
    }
  }
  // Wrong op/dtype pairs, enums out of range and p = 2 with an in-range count: refused too.
  RandomSpec bad_p = spec(Op::Bernoulli, DType::U8);
  bad_p.p = 2;
  for (const RandomSpec& r :
       {spec(Op::Uniform, DType::I64), spec(Op::Bits, DType::U8),
        spec(static_cast<Op>(9), DType::U32), spec(Op::Bernoulli, static_cast<DType>(77)), bad_p}) {
    EXPECT_THROW(mpsrt::random_fill(b_, 16, r, g, s_), std::invalid_argument);
  }
  expect_untouched();
  // The largest count that fits writes B and nothing else.
  for (const RandomSpec& r : specs) {
    const uint64_t elem = r.dtype == DType::U8 || r.dtype == DType::Bool    ? 1
                          : r.dtype == DType::F16 || r.dtype == DType::BF16 ? 2
                          : r.dtype == DType::F64 || r.dtype == DType::I64  ? 8
                                                                            : 4;
    mpsrt::random_fill(b_, kSize / elem, r, g, s_);
  }
  expect_untouched(false);
}

TEST_P(NeighbourTest, RefusedFillsAndCopiesWriteNothing) {
  for (unsigned size : {0u, 3u, 16u}) {
    EXPECT_THROW(b_.fill(0xFF, size, s_), std::invalid_argument);
  }
  Buffer bigger(kSize * 2, s_);
  bigger.fill(0xEE, 1, s_);
  EXPECT_THROW(b_.copy_from(bigger, s_), std::invalid_argument);
  std::vector<uint8_t> host(kSize * 3, 0xDD);
  EXPECT_THROW(b_.copy_from_host(host.data(), kSize + 1), std::invalid_argument);
  EXPECT_THROW(b_.copy_from_host(host.data(), host.size()), std::invalid_argument);
  EXPECT_THROW(b_.copy_from_host(nullptr, kSize), std::invalid_argument);
  if (mpsrt::device_count() >= 2) {
    EXPECT_THROW(b_.fill(0xFF, 1, mpsrt::default_stream(1)), std::invalid_argument);
    Buffer other(kSize, mpsrt::default_stream(1));
    // A copy from another device is allowed; on a stream of the source's device it is not.
    EXPECT_THROW(b_.copy_from(other, mpsrt::default_stream(1)), std::invalid_argument);
  }
  expect_untouched();
  // What is allowed stays inside B: a fill with a pattern wider than a 1-byte tail, a copy
  // from B to itself, a copy from host memory that is B's own.
  b_.fill(0x0102030405060708ULL, 8, s_);
  b_.copy_from(b_, s_);
  mpsrt::synchronize(0);
  b_.copy_from_host(b_.host_ptr(), kSize);
  expect_untouched(false);
}

std::string name_of(const ::testing::TestParamInfo<std::string>& p) {
  return p.param;
}

// Issue 16 through the public API on each backend: random_fill on the dtypes torch's random_
// and bernoulli_ added writes low + w % r as the dtype (exact for floats, != 0 for bool) and
// the bernoulli 1/0; Generator::clone_state copies the state and then advances on its own.
TEST_P(BadInputTest, NewDtypesAndCloneStateThroughThePublicApi) {
  namespace philox = mpsrt::philox;
  Stream s = mpsrt::default_stream(0);
  Generator g(0);
  constexpr uint64_t kSeed = 0x1234abcd5678ULL, kOffset = 7, kN = 301;
  struct IntCase {
    DType dt;
    int64_t low;
    uint64_t range;
  };
  for (const IntCase& c :
       {IntCase{DType::F16, -2048, 4097}, IntCase{DType::BF16, 0, 257},
        IntCase{DType::F32, -(int64_t(1) << 24), (uint64_t(1) << 25) + 1},
        IntCase{DType::F64, 0, (uint64_t(1) << 53) + 1}, IntCase{DType::Bool, 0, 2},
        IntCase{DType::I8, -128, 256}, IntCase{DType::I16, -5, 11}, IntCase{DType::U16, 0, 65536},
        IntCase{DType::U64, 0, uint64_t(1) << 63}}) {
    SCOPED_TRACE(mpsrt::dtype_name(c.dt));
    RandomSpec r = spec(Op::IntRange, c.dt);
    r.low = c.low;
    r.range = c.range;
    Buffer b(kN * 8, s);
    g.manual_seed(kSeed);
    g.set_offset(kOffset);
    mpsrt::random_fill(b, kN, r, g, s);
    mpsrt::synchronize(0);
    const bool wide = c.range > (uint64_t(1) << 32);
    EXPECT_EQ(g.offset(), kOffset + (kN * (wide ? 2 : 1) + 3) / 4);
    const auto* bytes = static_cast<const uint8_t*>(b.host_ptr());
    ASSERT_NE(bytes, nullptr);
    for (uint64_t e = 0; e < kN; ++e) {
      const uint64_t x = wide ? ((uint64_t(philox::word(kSeed, kOffset, 2 * e + 1)) << 32) |
                                 philox::word(kSeed, kOffset, 2 * e)) %
                                    c.range
                              : philox::word(kSeed, kOffset, e) % c.range;
      const int64_t v = c.low + static_cast<int64_t>(x);
      double got = 0;
      switch (c.dt) {
        case DType::F16: {
          uint16_t h;
          std::memcpy(&h, bytes + 2 * e, 2);
          const int ex = (h >> 10) & 0x1f;
          const double m = ex == 0 ? (h & 0x3ff) * std::ldexp(1.0, -24)
                                   : std::ldexp(1.0 + (h & 0x3ff) / 1024.0, ex - 15);
          got = (h & 0x8000) ? -m : m;
          break;
        }
        case DType::BF16: {
          uint16_t h;
          std::memcpy(&h, bytes + 2 * e, 2);
          const uint32_t w = uint32_t(h) << 16;
          float f;
          std::memcpy(&f, &w, 4);
          got = f;
          break;
        }
        case DType::F32: {
          float f;
          std::memcpy(&f, bytes + 4 * e, 4);
          got = f;
          break;
        }
        case DType::F64:
          std::memcpy(&got, bytes + 8 * e, 8);
          break;
        case DType::Bool:
          ASSERT_EQ(bytes[e], v != 0 ? 1 : 0) << e;
          continue;
        case DType::I8:
          ASSERT_EQ(static_cast<int8_t>(bytes[e]), v) << e;
          continue;
        case DType::I16: {
          int16_t i;
          std::memcpy(&i, bytes + 2 * e, 2);
          ASSERT_EQ(i, v) << e;
          continue;
        }
        case DType::U16: {
          uint16_t u;
          std::memcpy(&u, bytes + 2 * e, 2);
          ASSERT_EQ(u, v) << e;
          continue;
        }
        default: {
          uint64_t u;
          std::memcpy(&u, bytes + 8 * e, 8);
          ASSERT_EQ(u, static_cast<uint64_t>(v)) << e;
          continue;
        }
      }
      ASSERT_EQ(got, static_cast<double>(v)) << "element " << e;
    }
  }
  // bernoulli_ on int8 / int16: exactly 1 or 0 in each element.
  for (DType dt : {DType::I8, DType::I16}) {
    RandomSpec r = spec(Op::Bernoulli, dt);
    r.p = 0.3;
    Buffer b(kN * 2, s);
    g.manual_seed(kSeed);
    g.set_offset(kOffset);
    mpsrt::random_fill(b, kN, r, g, s);
    mpsrt::synchronize(0);
    const auto* bytes = static_cast<const uint8_t*>(b.host_ptr());
    const uint64_t t = philox::bernoulli_threshold(0.3);
    const size_t es = dt == DType::I8 ? 1 : 2;
    for (uint64_t e = 0; e < kN; ++e) {
      const uint8_t want = philox::word(kSeed, kOffset, e) < t ? 1 : 0;
      ASSERT_EQ(bytes[es * e], want) << e;
      if (es == 2) {
        ASSERT_EQ(bytes[es * e + 1], 0) << e;
      }
    }
  }
  // random_u64: the first two words of the next block, which the offset moves past.
  g.manual_seed(7);
  g.set_offset(3);
  const uint64_t r = g.random_u64();
  EXPECT_EQ(r, static_cast<uint64_t>(philox::word(7, 3, 0)) |
                   (static_cast<uint64_t>(philox::word(7, 3, 1)) << 32));
  EXPECT_EQ(g.offset(), 4u);
  EXPECT_NE(g.random_u64(), r);
  // clone_state: same (seed, offset) and numbers, then independent.
  g.manual_seed(99);
  g.set_offset(40);
  Generator c = g.clone_state();
  EXPECT_EQ(c.device(), g.device());
  EXPECT_EQ(c.initial_seed(), 99u);
  EXPECT_EQ(c.offset(), 40u);
  EXPECT_EQ(c.get_state(), g.get_state());
  Buffer x(64, s), y(64, s);
  mpsrt::random_fill(x, 16, spec(Op::Bits, DType::U32), g, s);
  mpsrt::random_fill(y, 16, spec(Op::Bits, DType::U32), c, s);
  mpsrt::synchronize(0);
  EXPECT_EQ(std::memcmp(x.host_ptr(), y.host_ptr(), 64), 0);
  EXPECT_EQ(g.offset(), 44u);
  EXPECT_EQ(c.offset(), 44u);
  c.set_offset(0);
  c.manual_seed(1);
  EXPECT_EQ(g.offset(), 44u);
  EXPECT_EQ(g.initial_seed(), 99u);
}

INSTANTIATE_TEST_SUITE_P(On, BadInputTest, ::testing::ValuesIn(mpsrt::available_backends()),
                         name_of);
INSTANTIATE_TEST_SUITE_P(On, NeighbourTest, ::testing::ValuesIn(mpsrt::available_backends()),
                         name_of);

}  // namespace
