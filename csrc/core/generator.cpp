#include "core/generator.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "backends/backend.h"
#include "core/access.h"
#include "core/allocator/caching_allocator.h"
#include "core/format.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/error.h"
#include "mpsrt/philox.h"

namespace mpsrt {
namespace detail {

uint64_t nondeterministic_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::pair<uint64_t, uint64_t> GeneratorImpl::reserve(uint64_t words) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t first = offset_;
  offset_ += philox::blocks_for_words(words);
  return {seed_, first};
}

namespace {
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

RngState GeneratorImpl::state() const {
  uint64_t seed, offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seed = seed_;
    offset = offset_;
  }
  RngState s{};
  put32(&s[0], 1);
  if (offset > 0) {
    const philox::Words last = philox::block(seed, offset - 1);
    for (int i = 0; i < 4; ++i) put32(&s[4 + 4 * i], last.w[i]);
  }
  put32(&s[20], static_cast<uint32_t>(seed));
  put32(&s[24], static_cast<uint32_t>(seed >> 32));
  put64(&s[28], seed);
  put64(&s[36], offset);
  return s;
}

void GeneratorImpl::set_state(const uint8_t* data, size_t size) {
  if (size != kRngStateSize) {
    throw_invalid("[random] set_rng_state: the state must be 44 bytes, got " +
                  std::to_string(size));
  }
  if (data == nullptr) throw_invalid("[random] set_rng_state: the state is a null pointer");
  const uint64_t seed = get64(data + 28);
  const uint64_t offset = get64(data + 36);
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = offset;
}

}  // namespace detail

using detail::Runtime;

namespace {
// A moved-from Generator has no state; every use of it says so instead of crashing.
detail::GeneratorImpl& live(const std::shared_ptr<detail::GeneratorImpl>& impl) {
  if (MPSRT_UNLIKELY(impl == nullptr)) {
    detail::throw_invalid("[random] the Generator is empty (moved from); use a live Generator");
  }
  return *impl;
}
}  // namespace

Generator::Generator(int device)
    : impl_(std::make_shared<detail::GeneratorImpl>(detail::nondeterministic_seed())),
      device_(Runtime::get().resolve(device)) {}

Generator Generator::default_generator(int device) {
  detail::DeviceContext& d = Runtime::get().device(device);
  return Generator(d.default_generator(), d.index());
}

void Generator::manual_seed(uint64_t seed) {
  live(impl_).manual_seed(seed);
}

uint64_t Generator::seed() {
  const uint64_t s = detail::nondeterministic_seed();
  live(impl_).manual_seed(s);
  return s;
}

uint64_t Generator::initial_seed() const {
  return live(impl_).seed();
}
uint64_t Generator::offset() const {
  return live(impl_).offset();
}
void Generator::set_offset(uint64_t offset) {
  live(impl_).set_offset(offset);
}
RngState Generator::get_state() const {
  return live(impl_).state();
}
void Generator::set_state(const uint8_t* data, size_t size) {
  live(impl_).set_state(data, size);
}
uint64_t Generator::random_u64() {
  const auto [seed, first] = live(impl_).reserve(2);
  const philox::Words w = philox::block(seed, first);
  return static_cast<uint64_t>(w.w[0]) | (static_cast<uint64_t>(w.w[1]) << 32);
}
Generator Generator::clone_state() const {
  const auto [seed, offset] = live(impl_).seed_and_offset();
  return Generator(std::make_shared<detail::GeneratorImpl>(seed, offset), device_);
}

namespace {

using detail::Int128;
using detail::py_float;

// [min, max) of the integers IntRange can write into dtype d (mpsrt/dtype.h: for a
// floating-point dtype the integers it holds exactly -- torch warns beyond them and writes
// rounded values; mpsrt refuses, so every backend writes the same exact values).
std::pair<Int128, Int128> int_bounds(RandomSpec::DType d) noexcept {
  return {Int128(dtype_info(d).int_min), Int128(dtype_info(d).int_max)};
}

}  // namespace

namespace {

// The spec's values are acceptable (the rules of random_fill's comment). Cost: a few compares.
bool spec_ok(const RandomSpec& s) noexcept {
  if (!random_supported(s.op, s.dtype)) return false;
  switch (s.op) {
    case RandomSpec::Op::Bits:
      return true;
    case RandomSpec::Op::Uniform:
      return std::isfinite(s.a) && std::isfinite(s.b) && s.a <= s.b;
    case RandomSpec::Op::Normal:
      return std::isfinite(s.a) && std::isfinite(s.b) && s.b >= 0.0;
    case RandomSpec::Op::IntRange: {
      const auto [lo, hi] = int_bounds(s.dtype);
      return s.range >= 1 && Int128(s.low) >= lo && Int128(s.low) + Int128(s.range) <= hi;
    }
    case RandomSpec::Op::Bernoulli:
      return s.p >= 0.0 && s.p <= 1.0;  // NaN fails both
  }
  return false;
}

// The function of the Python API that makes each op (its messages name it).
const char* caller_of(RandomSpec::Op op) noexcept {
  switch (op) {
    case RandomSpec::Op::Uniform:
      return "uniform_";
    case RandomSpec::Op::Normal:
      return "normal_";
    case RandomSpec::Op::IntRange:
      return "random_";
    case RandomSpec::Op::Bernoulli:
      return "bernoulli_";
    default:
      return "random_bits";
  }
}

// Says what is wrong with a spec that failed spec_ok(), in the Python layer's words.
[[noreturn]] MPSRT_COLD void bad_spec(const RandomSpec& s) {
  const char* op = random_op_name(s.op);
  const char* dt = dtype_name(s.dtype);
  if (op == nullptr) {
    detail::throw_invalid("[random] random_fill: invalid op " +
                          std::to_string(static_cast<unsigned>(s.op)) +
                          "; expected a RandomSpec::Op (Bits, Uniform, Normal, IntRange or "
                          "Bernoulli)");
  }
  if (dt == nullptr) {
    detail::throw_invalid("[random] random_fill: invalid dtype " +
                          std::to_string(static_cast<unsigned>(s.dtype)) +
                          "; expected a RandomSpec::DType (U8, I32, I64, U32, F16, BF16, F32, "
                          "F64, Bool, I8, I16, U16 or U64)");
  }
  if (!random_supported(s.op, s.dtype)) {
    std::string ok;
    for (int d = 0; d < kDTypeCount; ++d) {
      const auto dd = static_cast<RandomSpec::DType>(d);
      if (random_supported(s.op, dd)) ok += std::string(ok.empty() ? "" : ", ") + dtype_name(dd);
    }
    detail::throw_invalid(std::string("[random] random_fill: the ") + op + " op cannot write " +
                          dt + "; it writes " + ok);
  }
  const std::string c = std::string(caller_of(s.op)) + "(): ";
  auto finite = [&](double v, const char* name) {
    if (!std::isfinite(v)) detail::throw_invalid(c + name + " must be finite, got " + py_float(v));
  };
  switch (s.op) {
    case RandomSpec::Op::Uniform:
      finite(s.a, "low");
      finite(s.b, "high");
      detail::throw_invalid(c + "expected low <= high, got low=" + py_float(s.a) +
                            ", high=" + py_float(s.b));
    case RandomSpec::Op::Normal:
      finite(s.a, "mean");
      finite(s.b, "std");
      detail::throw_invalid(c + "std must be >= 0, got " + py_float(s.b));
    case RandomSpec::Op::IntRange: {
      const Int128 lo = s.low;
      const Int128 hi = lo + Int128(s.range);
      if (s.range == 0) {
        detail::throw_invalid(c + "expected low < high, got low=" + detail::int128_str(lo) +
                              ", high=" + detail::int128_str(hi));
      }
      const auto [dmin, dmax] = int_bounds(s.dtype);
      detail::throw_invalid(
          c + "[" + detail::int128_str(lo) + ", " + detail::int128_str(hi) + ") does not fit in " +
          dt + " ([" + detail::int128_str(dmin) + ", " + detail::int128_str(dmax) + "))" +
          (dtype_is_float(s.dtype)
               ? std::string("; a ") + dt + " holds the integers of that range exactly"
               : std::string()));
    }
    case RandomSpec::Op::Bernoulli:
      finite(s.p, "p");
      detail::throw_invalid(c + "p must be in [0, 1], got " + py_float(s.p));
    default:
      break;
  }
  detail::throw_invalid("[random] random_fill: invalid spec");
}

[[noreturn]] MPSRT_COLD void bad_fill_target(const Buffer& buffer, uint64_t count,
                                             const RandomSpec& spec, const Generator& generator,
                                             const Stream& stream) {
  if (detail::Access::impl(generator) == nullptr) {
    detail::throw_invalid("[random] the Generator is empty (moved from); use a live Generator");
  }
  if (!buffer.defined()) detail::throw_invalid("[random] the buffer is empty or released");
  buffer.check_owner();
  stream.check_owner();
  const std::string c = std::string(caller_of(spec.op)) + "(): ";
  if (generator.device() != buffer.device()) {
    detail::throw_invalid(c + "the generator is on device " + std::to_string(generator.device()) +
                          " but the buffer on device " + std::to_string(buffer.device()));
  }
  if (buffer.device() != stream.device()) {
    detail::throw_invalid("[random] the buffer (device " + std::to_string(buffer.device()) +
                          "), the generator (device " + std::to_string(generator.device()) +
                          ") and the stream (device " + std::to_string(stream.device()) +
                          ") must be on one device");
  }
  const size_t size = dtype_size(spec.dtype);
  detail::throw_invalid("[random] random_fill: " + std::to_string(count) + " elements of " +
                        dtype_name(spec.dtype) + " need more than the buffer's " +
                        std::to_string(buffer.nbytes()) +
                        " bytes; pass count <= " + std::to_string(buffer.nbytes() / size));
}

}  // namespace

void random_fill(Buffer& buffer, uint64_t count, const RandomSpec& spec, Generator& generator,
                 const Stream& stream) {
  // Every check is a compare on the fast path; messages are built out of line.
  if (MPSRT_UNLIKELY(!spec_ok(spec))) bad_spec(spec);
  if (count == 0) return;
  const size_t elem = dtype_size(spec.dtype);
  detail::GeneratorImpl* const gen = detail::Access::impl(generator);
  detail::StreamImpl* const s = detail::Access::impl(stream);
  if (MPSRT_UNLIKELY(gen == nullptr || !buffer.defined() || s == nullptr ||
                     generator.device() != buffer.device() || buffer.device() != stream.device() ||
                     count > buffer.nbytes() / elem)) {
    bad_fill_target(buffer, count, spec, generator, stream);
  }
  buffer.check_owner();
  stream.check_owner();
  backend::RandomParams p;
  p.count = count;
  p.op = spec.op;
  p.dtype = spec.dtype;
  p.a = spec.a;
  p.b = spec.b;
  p.low = spec.low;
  p.range = spec.range;
  p.threshold = philox::bernoulli_threshold(spec.p);
  const detail::Block* const block = detail::Access::block(buffer);
  if (s != block->stream) buffer.record_stream(stream);
  const backend::BufferRef ref{block->heap->heap.get(), block->offset + buffer.offset()};
  // The counter range is reserved under the stream's lock, in encode order: two threads
  // encoding on one stream get the blocks in the order their commands run.
  using detail::prof::Op;
  static constexpr Op kOps[] = {Op::RandomBits, Op::Uniform, Op::Normal, Op::RandomInt,
                                Op::Bernoulli};
  const detail::prof::OpDesc desc{kOps[static_cast<size_t>(p.op)], buffer.nbytes(),
                                  buffer.address()};
  s->encode(desc, [&](backend::CommandBuffer& cb) {
    const auto [seed, first] = gen->reserve(backend::random_words(p));
    p.seed = seed;
    p.offset = first;
    cb.random(ref, p);
  });
}

}  // namespace mpsrt
