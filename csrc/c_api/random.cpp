// The C API's generators and random fills (include/mpsrt/c_api.h): mpsrt's Philox generators.
// A NULL generator handle names a device's default generator, looked up at each call (a runtime
// reset makes new default generators). Every call into the runtime is qualified (mpsrt::...):
// an unqualified one would find the entry of the same name first.
#include <algorithm>
#include <string>

#include "c_api/internal.h"
#include "mpsrt/allocator.h"
#include "mpsrt/dtype.h"
#include "mpsrt/generator.h"

namespace mpsrt::c_api {
namespace {

// A handle's generator, or the device's default one.
Generator gen(MpsrtGenerator* g, int device) {
  return g != nullptr ? *reinterpret_cast<Generator*>(g) : Generator::default_generator(device);
}
MpsrtGenerator* handle(Generator g) {
  return reinterpret_cast<MpsrtGenerator*>(new Generator(std::move(g)));
}

MpsrtStatus generator_create(int device, MpsrtGenerator** out) noexcept {
  return guarded([&] { *need(out, "generator_create", "out") = handle(Generator(device)); });
}

void generator_destroy(MpsrtGenerator* g) noexcept {
  delete reinterpret_cast<Generator*>(g);
}

int generator_device(MpsrtGenerator* g, int device) noexcept {
  int d = -1;
  guarded([&] { d = gen(g, device).device(); });
  return d;
}

MpsrtStatus generator_clone_state(MpsrtGenerator* g, int device, MpsrtGenerator** out) noexcept {
  return guarded(
      [&] { *need(out, "generator_clone_state", "out") = handle(gen(g, device).clone_state()); });
}

MpsrtStatus generator_manual_seed(MpsrtGenerator* g, int device, uint64_t seed) noexcept {
  return guarded([&] { gen(g, device).manual_seed(seed); });
}

MpsrtStatus generator_seed(MpsrtGenerator* g, int device, uint64_t* seed) noexcept {
  return guarded([&] { *need(seed, "generator_seed", "seed") = gen(g, device).seed(); });
}

MpsrtStatus generator_initial_seed(MpsrtGenerator* g, int device, uint64_t* seed) noexcept {
  return guarded(
      [&] { *need(seed, "generator_initial_seed", "seed") = gen(g, device).initial_seed(); });
}

MpsrtStatus generator_offset(MpsrtGenerator* g, int device, uint64_t* offset) noexcept {
  return guarded([&] { *need(offset, "generator_offset", "offset") = gen(g, device).offset(); });
}

MpsrtStatus generator_set_offset(MpsrtGenerator* g, int device, uint64_t offset) noexcept {
  return guarded([&] { gen(g, device).set_offset(offset); });
}

MpsrtStatus generator_get_state(MpsrtGenerator* g, int device, uint8_t* out, size_t size) noexcept {
  return guarded([&] {
    if (out == nullptr || size != kRngStateSize) {
      throw std::invalid_argument("[c_api] generator_get_state: needs a buffer of " +
                                  std::to_string(kRngStateSize) + " bytes, got " +
                                  std::to_string(out == nullptr ? 0 : size));
    }
    const RngState st = gen(g, device).get_state();
    std::copy(st.begin(), st.end(), out);
  });
}

MpsrtStatus generator_set_state(MpsrtGenerator* g, int device, const uint8_t* data,
                                size_t size) noexcept {
  return guarded([&] { gen(g, device).set_state(data, size); });
}

MpsrtStatus generator_random_u64(MpsrtGenerator* g, int device, uint64_t* out) noexcept {
  return guarded([&] { *need(out, "generator_random_u64", "out") = gen(g, device).random_u64(); });
}

// The C spec as mpsrt::RandomSpec; std::invalid_argument when op cannot write dtype.
RandomSpec spec_of(const MpsrtRandomSpec& spec) {
  RandomSpec rs;
  rs.op = static_cast<RandomOp>(spec.op);
  rs.dtype = static_cast<DType>(spec.dtype);
  if (spec.op < 0 || spec.op >= kRandomOpCount || spec.dtype < 0 || spec.dtype >= kDTypeCount ||
      !mpsrt::random_supported(rs.op, rs.dtype)) {
    throw std::invalid_argument("[c_api] random_fill: op " + std::to_string(spec.op) +
                                " cannot write dtype " + std::to_string(spec.dtype) +
                                "; see random_supported(op, dtype)");
  }
  rs.a = spec.a;
  rs.b = spec.b;
  rs.low = spec.low;
  rs.range = spec.range;
  rs.p = spec.p;
  return rs;
}

MpsrtStatus random_fill(MpsrtBuffer* b, size_t offset, uint64_t count, const MpsrtRandomSpec* spec,
                        MpsrtGenerator* g, MpsrtStream* s) noexcept {
  return guarded([&] {
    const RandomSpec rs = spec_of(*need(spec, "random_fill", "spec"));
    const Buffer& whole = *need(buf(b), "random_fill", "buffer");
    Buffer v = whole.view(offset, whole.nbytes() - std::min(offset, whole.nbytes()));
    Generator g2 = gen(g, whole.device());
    mpsrt::random_fill(v, count, rs, g2, stream_of_handle(s));
  });
}

int random_supported(int op, int dtype) noexcept {
  if (op < 0 || op >= kRandomOpCount || dtype < 0 || dtype >= kDTypeCount) return 0;
  return mpsrt::random_supported(static_cast<RandomOp>(op), static_cast<DType>(dtype)) ? 1 : 0;
}

MpsrtStatus random_int_bounds(int dtype, int64_t* min, uint64_t* max) noexcept {
  return guarded([&] {
    const RandomIntBounds r = dtype < 0 || dtype >= kDTypeCount
                                  ? RandomIntBounds{}
                                  : mpsrt::random_int_bounds(static_cast<DType>(dtype));
    if (r.max == 0) {
      throw std::invalid_argument("[c_api] random_int_bounds: no dtype " + std::to_string(dtype) +
                                  "; pass an MpsrtDType");
    }
    *need(min, "random_int_bounds", "min") = r.min;
    *need(max, "random_int_bounds", "max") = r.max;
  });
}

}  // namespace

void fill_random(MpsrtCApi& t) {
  t.generator_create = generator_create;
  t.generator_destroy = generator_destroy;
  t.generator_device = generator_device;
  t.generator_clone_state = generator_clone_state;
  t.generator_manual_seed = generator_manual_seed;
  t.generator_seed = generator_seed;
  t.generator_initial_seed = generator_initial_seed;
  t.generator_offset = generator_offset;
  t.generator_set_offset = generator_set_offset;
  t.generator_get_state = generator_get_state;
  t.generator_set_state = generator_set_state;
  t.generator_random_u64 = generator_random_u64;
  t.random_fill = random_fill;
  t.random_supported = random_supported;
  t.random_int_bounds = random_int_bounds;
}

}  // namespace mpsrt::c_api
