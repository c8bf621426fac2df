// mpsrt's C API table (include/mpsrt/c_api.h) over the runtime this module holds, exported as
// the PyCapsule mpsrt._C._c_api. The PyTorch device glue (csrc/torch) calls only this table,
// so the process has one runtime: one caching allocator, one set of streams and events.
// Each entry translates C++ exceptions to an MpsrtStatus and a per-thread message.
#include <stdexcept>
#include <string>

#include "mpsrt/allocator.h"
#include "mpsrt/c_api.h"
#include "mpsrt/device.h"
#include "mpsrt/error.h"
#include "mpsrt/event.h"
#include "mpsrt/generator.h"
#include "mpsrt/profiler.h"
#include "mpsrt/stream.h"
#include "python/bindings.h"

namespace mpsrt::python {
namespace {

// The C API's names are mpsrt/dtype.h's values.
static_assert(MPSRT_DTYPE_UINT8 == int(DType::U8) && MPSRT_DTYPE_INT32 == int(DType::I32) &&
                  MPSRT_DTYPE_INT64 == int(DType::I64) && MPSRT_DTYPE_UINT32 == int(DType::U32) &&
                  MPSRT_DTYPE_FLOAT16 == int(DType::F16) &&
                  MPSRT_DTYPE_BFLOAT16 == int(DType::BF16) &&
                  MPSRT_DTYPE_FLOAT32 == int(DType::F32) &&
                  MPSRT_DTYPE_FLOAT64 == int(DType::F64) && MPSRT_DTYPE_BOOL == int(DType::Bool) &&
                  MPSRT_DTYPE_INT8 == int(DType::I8) && MPSRT_DTYPE_INT16 == int(DType::I16) &&
                  MPSRT_DTYPE_UINT16 == int(DType::U16) && MPSRT_DTYPE_UINT64 == int(DType::U64) &&
                  MPSRT_DTYPE_UINT64 + 1 == kDTypeCount,
              "MpsrtDType mirrors mpsrt::DType");
static_assert(MPSRT_RANDOM_BITS == int(RandomOp::Bits) &&
                  MPSRT_RANDOM_UNIFORM == int(RandomOp::Uniform) &&
                  MPSRT_RANDOM_NORMAL == int(RandomOp::Normal) &&
                  MPSRT_RANDOM_INT_RANGE == int(RandomOp::IntRange) &&
                  MPSRT_RANDOM_BERNOULLI == int(RandomOp::Bernoulli) &&
                  MPSRT_RANDOM_BERNOULLI + 1 == kRandomOpCount,
              "MpsrtRandomOp mirrors mpsrt::RandomOp");

thread_local std::string t_last_error;

template <class F>
MpsrtStatus guarded(F&& f) noexcept {
  try {
    f();
    t_last_error.clear();
    return MPSRT_OK;
  } catch (const OutOfMemory& e) {
    t_last_error = e.what();
    return MPSRT_ERR_OOM;
  } catch (const std::invalid_argument& e) {
    t_last_error = e.what();
    return MPSRT_ERR_VALUE;
  } catch (const std::exception& e) {
    t_last_error = e.what();
    return MPSRT_ERR_RUNTIME;
  } catch (...) {
    t_last_error = "[c_api] unknown C++ exception";
    return MPSRT_ERR_RUNTIME;
  }
}

Buffer* buf(MpsrtBuffer* b) {
  return reinterpret_cast<Buffer*>(b);
}
const Buffer* buf(const MpsrtBuffer* b) {
  return reinterpret_cast<const Buffer*>(b);
}
// A stream handle is the Stream's opaque handle() value, as a pointer.
Stream stream_of_handle(MpsrtStream* s) {
  return Stream::from_handle(reinterpret_cast<uintptr_t>(s));
}
MpsrtStream* handle(const Stream& s) {
  return reinterpret_cast<MpsrtStream*>(s.handle());
}
Event* ev(MpsrtEvent* e) {
  return reinterpret_cast<Event*>(e);
}

// A handle's generator, or the device's default one (looked up now: a runtime reset makes new
// default generators).
Generator gen(MpsrtGenerator* g, int device) {
  return g != nullptr ? *reinterpret_cast<Generator*>(g) : Generator::default_generator(device);
}
MpsrtGenerator* handle(Generator g) {
  return reinterpret_cast<MpsrtGenerator*>(new Generator(std::move(g)));
}

int query_to_int(MpsrtStatus st, bool done) {
  return st == MPSRT_OK ? (done ? 1 : 0) : -1;
}

const MpsrtCApi kApi = {
    MPSRT_C_API_VERSION,
    static_cast<uint32_t>(sizeof(MpsrtCApi)),
    []() noexcept -> const char* { return t_last_error.c_str(); },
    // devices
    []() noexcept -> const char* {
      static const std::string name = [] {
        try {
          return backend_name();
        } catch (...) {
          return std::string("unavailable");
        }
      }();
      return name.c_str();
    },
    []() noexcept -> int {
      int n = 0;
      guarded([&] { n = device_count(); });
      return n;
    },
    []() noexcept -> int {
      int d = 0;
      guarded([&] { d = current_device(); });
      return d;
    },
    [](int device, int* previous) noexcept {
      return guarded([&] {
        int prev = set_device(device);
        if (previous) *previous = prev;
      });
    },
    [](int device) noexcept -> int {
      int visible = 0;
      guarded([&] {
        Buffer probe(1, current_stream(device));
        visible = probe.host_ptr() != nullptr ? 1 : 0;
      });
      return visible;
    },
    [](int device) noexcept { return guarded([&] { synchronize(device); }); },
    // memory
    [](size_t nbytes, int device, MpsrtBuffer** out, void** host) noexcept {
      return guarded([&] {
        auto* b = new Buffer(nbytes, current_stream(device));
        *out = reinterpret_cast<MpsrtBuffer*>(b);
        if (host) *host = b->host_ptr();
      });
    },
    [](MpsrtBuffer* b) noexcept { delete buf(b); },
    [](MpsrtBuffer* b, MpsrtStream* s) noexcept {
      return guarded([&] { buf(b)->record_stream(stream_of_handle(s)); });
    },
    [](MpsrtBuffer* b, size_t offset, size_t nbytes, uint64_t pattern, unsigned pattern_size,
       MpsrtStream* s) noexcept {
      return guarded([&] {
        Buffer v = buf(b)->view(offset, nbytes);
        v.fill(pattern, pattern_size, stream_of_handle(s));
      });
    },
    [](MpsrtBuffer* dst, size_t dst_offset, const MpsrtBuffer* src, size_t src_offset,
       size_t nbytes, MpsrtStream* s) noexcept {
      return guarded([&] {
        Buffer d = buf(dst)->view(dst_offset, nbytes);
        Buffer v = buf(src)->view(src_offset, nbytes);
        d.copy_from(v, stream_of_handle(s));
      });
    },
    [](int device, void (*visit)(void*, const char*, int64_t), void* ctx) noexcept {
      return guarded([&] {
        for (const auto& [key, value] : memory_stats(device)) visit(ctx, key.c_str(), value);
      });
    },
    [](int device) noexcept { return guarded([&] { reset_peak_memory_stats(device); }); },
    [](int device) noexcept { return guarded([&] { reset_accumulated_memory_stats(device); }); },
    [](int device) noexcept { return guarded([&] { empty_cache(device); }); },
    // streams
    [](int device) noexcept -> MpsrtStream* {
      MpsrtStream* s = nullptr;
      guarded([&] { s = handle(default_stream(device)); });
      return s;
    },
    [](int device) noexcept -> MpsrtStream* {
      MpsrtStream* s = nullptr;
      guarded([&] { s = handle(current_stream(device)); });
      return s;
    },
    [](int priority, int device, MpsrtStream** out) noexcept {
      return guarded([&] { *out = handle(stream_from_pool(priority, device)); });
    },
    [](MpsrtStream* s) noexcept -> MpsrtStream* {
      MpsrtStream* prev = nullptr;
      guarded([&] { prev = handle(set_current_stream(stream_of_handle(s))); });
      return prev;
    },
    [](MpsrtStream* s) noexcept -> int { return stream_of_handle(s).device(); },
    [](MpsrtStream* s) noexcept -> int { return stream_of_handle(s).priority(); },
    [](MpsrtStream* s) noexcept { return guarded([&] { stream_of_handle(s).synchronize(); }); },
    [](MpsrtStream* s) noexcept -> int {
      bool done = false;
      auto st = guarded([&] { done = stream_of_handle(s).query(); });
      return query_to_int(st, done);
    },
    // events
    [](int enable_timing, MpsrtEvent** out) noexcept {
      return guarded([&] { *out = reinterpret_cast<MpsrtEvent*>(new Event(enable_timing != 0)); });
    },
    [](MpsrtEvent* e) noexcept { delete ev(e); },
    [](MpsrtEvent* e, MpsrtStream* s) noexcept {
      return guarded([&] { ev(e)->record(stream_of_handle(s)); });
    },
    [](MpsrtEvent* e, MpsrtStream* s) noexcept {
      return guarded([&] { ev(e)->wait(stream_of_handle(s)); });
    },
    [](MpsrtEvent* e) noexcept -> int {
      bool done = false;
      auto st = guarded([&] { done = ev(e)->query(); });
      return query_to_int(st, done);
    },
    [](MpsrtEvent* e) noexcept { return guarded([&] { ev(e)->synchronize(); }); },
    [](MpsrtEvent* start, MpsrtEvent* end, double* ms) noexcept {
      return guarded([&] { *ms = ev(start)->elapsed_time(*ev(end)); });
    },
    // ---- version 2: generators and random fills
    [](int device, MpsrtGenerator** out) noexcept {
      return guarded([&] { *out = handle(Generator(device)); });
    },
    [](MpsrtGenerator* g) noexcept { delete reinterpret_cast<Generator*>(g); },
    [](MpsrtGenerator* g, int device) noexcept -> int {
      int d = -1;
      guarded([&] { d = gen(g, device).device(); });
      return d;
    },
    [](MpsrtGenerator* g, int device, MpsrtGenerator** out) noexcept {
      return guarded([&] { *out = handle(gen(g, device).clone_state()); });
    },
    [](MpsrtGenerator* g, int device, uint64_t seed) noexcept {
      return guarded([&] { gen(g, device).manual_seed(seed); });
    },
    [](MpsrtGenerator* g, int device, uint64_t* seed) noexcept {
      return guarded([&] { *seed = gen(g, device).seed(); });
    },
    [](MpsrtGenerator* g, int device, uint64_t* seed) noexcept {
      return guarded([&] { *seed = gen(g, device).initial_seed(); });
    },
    [](MpsrtGenerator* g, int device, uint64_t* offset) noexcept {
      return guarded([&] { *offset = gen(g, device).offset(); });
    },
    [](MpsrtGenerator* g, int device, uint64_t offset) noexcept {
      return guarded([&] { gen(g, device).set_offset(offset); });
    },
    [](MpsrtGenerator* g, int device, uint8_t* out, size_t size) noexcept {
      return guarded([&] {
        if (out == nullptr || size != kRngStateSize) {
          throw std::invalid_argument("[c_api] generator_get_state: needs a buffer of " +
                                      std::to_string(kRngStateSize) + " bytes, got " +
                                      std::to_string(out == nullptr ? 0 : size));
        }
        const RngState st = gen(g, device).get_state();
        std::copy(st.begin(), st.end(), out);
      });
    },
    [](MpsrtGenerator* g, int device, const uint8_t* data, size_t size) noexcept {
      return guarded([&] { gen(g, device).set_state(data, size); });
    },
    [](MpsrtGenerator* g, int device, uint64_t* out) noexcept {
      return guarded([&] { *out = gen(g, device).random_u64(); });
    },
    [](MpsrtBuffer* b, size_t offset, uint64_t count, const MpsrtRandomSpec* spec,
       MpsrtGenerator* g, MpsrtStream* s) noexcept {
      return guarded([&] {
        if (spec == nullptr) throw std::invalid_argument("[c_api] random_fill: spec is NULL");
        RandomSpec rs;
        rs.op = static_cast<RandomSpec::Op>(spec->op);
        rs.dtype = static_cast<RandomSpec::DType>(spec->dtype);
        if (spec->op < 0 || spec->op > 255 || spec->dtype < 0 || spec->dtype > 255 ||
            !random_supported(rs.op, rs.dtype)) {
          throw std::invalid_argument("[c_api] random_fill: op " + std::to_string(spec->op) +
                                      " cannot write dtype " + std::to_string(spec->dtype));
        }
        rs.a = spec->a;
        rs.b = spec->b;
        rs.low = spec->low;
        rs.range = spec->range;
        rs.p = spec->p;
        Buffer v = buf(b)->view(offset, buf(b)->nbytes() - std::min(offset, buf(b)->nbytes()));
        Generator g2 = gen(g, buf(b)->device());
        random_fill(v, count, rs, g2, stream_of_handle(s));
      });
    },
    [](int op, int dtype) noexcept -> int {
      if (op < 0 || op > 255 || dtype < 0 || dtype > 255) return 0;
      if (op < 0 || op >= kRandomOpCount || dtype < 0 || dtype >= kDTypeCount) return 0;
      return random_supported(static_cast<RandomOp>(op), static_cast<DType>(dtype)) ? 1 : 0;
    },
    [](int dtype, int64_t* min, uint64_t* max) noexcept {
      return guarded([&] {
        const RandomIntBounds r = dtype < 0 || dtype >= kDTypeCount
                                      ? RandomIntBounds{}
                                      : random_int_bounds(static_cast<DType>(dtype));
        if (r.max == 0) {
          throw std::invalid_argument("[c_api] random_int_bounds: no dtype " +
                                      std::to_string(dtype));
        }
        *min = r.min;
        *max = r.max;
      });
    },
    // profiler
    []() noexcept -> int64_t { return profiler::host_op_begin(); },
    [](const char* name, MpsrtStream* s, int64_t begin) noexcept {
      guarded([&] { profiler::host_op_end(name ? name : "", stream_of_handle(s), begin); });
    },
    [](const MpsrtBuffer* b) noexcept { return guarded([&] { buf(b)->check_owner(); }); },
    [](int device, uint64_t* free_bytes, uint64_t* total_bytes) noexcept {
      return guarded([&] {
        const auto [f, t] = mem_get_info(device);
        *free_bytes = f;
        *total_bytes = t;
      });
    },
    // ---- version 3: the memory models
    [](const MpsrtBuffer* b) noexcept -> uint64_t { return b ? buf(b)->address() : 0; },
    [](const MpsrtBuffer* b) noexcept -> void* { return b ? buf(b)->host_ptr() : nullptr; },
    [](MpsrtBuffer* dst, size_t offset, const void* src, size_t nbytes) noexcept {
      return guarded([&] {
        if (dst == nullptr)
          throw std::invalid_argument("[c_api] buffer_copy_from_host: NULL buffer");
        buf(dst)->view(offset, nbytes).copy_from_host(src, nbytes);
      });
    },
    [](const MpsrtBuffer* src, size_t offset, void* dst, size_t nbytes) noexcept {
      return guarded([&] {
        if (src == nullptr) throw std::invalid_argument("[c_api] buffer_copy_to_host: NULL buffer");
        buf(src)->view(offset, nbytes).copy_to_host(dst, nbytes);
      });
    },
};

}  // namespace

void init_c_api(nb::module_& m) {
  m.attr("_c_api") = nb::capsule(&kApi, MPSRT_C_API_CAPSULE_NAME);
  m.attr("_c_api_version") = MPSRT_C_API_VERSION;
}

}  // namespace mpsrt::python
