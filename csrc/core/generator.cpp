#include "core/generator.h"

#include <cstring>
#include <random>
#include <string>

#include "backends/backend.h"
#include "core/allocator/caching_allocator.h"
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
  const uint64_t seed = get64(data + 28);
  const uint64_t offset = get64(data + 36);
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = offset;
}

}  // namespace detail

using detail::Runtime;

Generator::Generator(int device)
    : impl_(std::make_shared<detail::GeneratorImpl>(detail::nondeterministic_seed())),
      device_(Runtime::get().resolve(device)) {}

Generator Generator::default_generator(int device) {
  detail::DeviceContext& d = Runtime::get().device(device);
  return Generator(d.default_generator(), d.index());
}

void Generator::manual_seed(uint64_t seed) {
  impl_->manual_seed(seed);
}

uint64_t Generator::seed() {
  const uint64_t s = detail::nondeterministic_seed();
  impl_->manual_seed(s);
  return s;
}

uint64_t Generator::initial_seed() const {
  return impl_->seed();
}
uint64_t Generator::offset() const {
  return impl_->offset();
}
void Generator::set_offset(uint64_t offset) {
  impl_->set_offset(offset);
}
RngState Generator::get_state() const {
  return impl_->state();
}
void Generator::set_state(const uint8_t* data, size_t size) {
  impl_->set_state(data, size);
}

void random_fill(Buffer& buffer, uint64_t count, const RandomSpec& spec, Generator& generator,
                 const Stream& stream) {
  if (count == 0) return;
  if (!buffer.defined()) detail::throw_invalid("[random] the buffer is empty or released");
  buffer.check_owner();
  stream.check_owner();
  if (generator.device() != stream.device() || buffer.device() != stream.device()) {
    detail::throw_invalid("[random] the buffer (device " + std::to_string(buffer.device()) +
                          "), the generator (device " + std::to_string(generator.device()) +
                          ") and the stream (device " + std::to_string(stream.device()) +
                          ") must be on one device");
  }
  backend::RandomParams p;
  p.count = count;
  p.op = static_cast<backend::RandomOp>(spec.op);
  p.dtype = static_cast<backend::RandomDType>(spec.dtype);
  p.a = spec.a;
  p.b = spec.b;
  p.low = spec.low;
  p.range = spec.range;
  if (spec.op == RandomSpec::Op::IntRange && spec.range == 0) {
    detail::throw_invalid("[random] the integer range must not be empty");
  }
  p.threshold = philox::bernoulli_threshold(spec.p);
  if (stream.impl() != buffer.block()->stream) buffer.record_stream(stream);
  const backend::BufferRef ref{buffer.block()->heap->heap.get(), buffer.block()->offset};
  // The counter range is reserved under the stream's lock, in encode order: two threads
  // encoding on one stream get the blocks in the order their commands run.
  using detail::prof::Op;
  static constexpr Op kOps[] = {Op::RandomBits, Op::Uniform, Op::Normal, Op::RandomInt,
                                Op::Bernoulli};
  const detail::prof::OpDesc desc{kOps[static_cast<size_t>(p.op)], buffer.nbytes(),
                                  buffer.address()};
  stream.impl()->encode(desc, [&](backend::CommandBuffer& cb) {
    const auto [seed, first] = generator.impl()->reserve(backend::random_words(p));
    p.seed = seed;
    p.offset = first;
    cb.random(ref, p);
  });
}

}  // namespace mpsrt
