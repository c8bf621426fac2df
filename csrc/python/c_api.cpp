// mpsrt's C API table (include/mpsrt/c_api.h) over the runtime this module holds, exported as
// the PyCapsule mpsrt._C._c_api. The PyTorch device glue (csrc/torch) calls only this table,
// so the process has one runtime: one caching allocator, one set of streams and events.
// Each entry translates C++ exceptions to an MpsrtStatus and a per-thread message.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mpsrt/allocator.h"
#include "mpsrt/c_api.h"
#include "mpsrt/device.h"
#include "mpsrt/error.h"
#include "mpsrt/event.h"
#include "mpsrt/generator.h"
#include "mpsrt/kernel.h"
#include "mpsrt/options.h"
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

// ------------------------------------------------------------------ the table's entries
// One function per entry of MpsrtCApi, named after its field and with exactly its pointer's
// signature (make_table assigns each by name, so a mismatch does not compile). Every call into
// the runtime is qualified (mpsrt::...): an unqualified one would find the entry of the same
// name first.
namespace entry {

// ---- version 1
const char* last_error() noexcept {
  return t_last_error.c_str();
}

// devices
const char* backend_name() noexcept {
  static const std::string name = [] {
    try {
      return mpsrt::backend_name();
    } catch (...) {
      return std::string("unavailable");
    }
  }();
  return name.c_str();
}

int device_count() noexcept {
  int n = 0;
  guarded([&] { n = mpsrt::device_count(); });
  return n;
}

int current_device() noexcept {
  int d = 0;
  guarded([&] { d = mpsrt::current_device(); });
  return d;
}

MpsrtStatus set_device(int device, int* previous) noexcept {
  return guarded([&] {
    int prev = mpsrt::set_device(device);
    if (previous) *previous = prev;
  });
}

int host_visible(int device) noexcept {
  int visible = 0;
  guarded([&] {
    Buffer probe(1, mpsrt::current_stream(device));
    visible = probe.host_ptr() != nullptr ? 1 : 0;
  });
  return visible;
}

MpsrtStatus synchronize(int device) noexcept {
  return guarded([&] { mpsrt::synchronize(device); });
}

// memory
MpsrtStatus buffer_alloc(size_t nbytes, int device, MpsrtBuffer** out, void** host) noexcept {
  return guarded([&] {
    auto* b = new Buffer(nbytes, mpsrt::current_stream(device));
    *out = reinterpret_cast<MpsrtBuffer*>(b);
    if (host) *host = b->host_ptr();
  });
}

void buffer_free(MpsrtBuffer* b) noexcept {
  delete buf(b);
}

MpsrtStatus buffer_record_stream(MpsrtBuffer* b, MpsrtStream* s) noexcept {
  return guarded([&] { buf(b)->record_stream(stream_of_handle(s)); });
}

MpsrtStatus buffer_fill(MpsrtBuffer* b, size_t offset, size_t nbytes, uint64_t pattern,
                        unsigned pattern_size, MpsrtStream* s) noexcept {
  return guarded([&] {
    Buffer v = buf(b)->view(offset, nbytes);
    v.fill(pattern, pattern_size, stream_of_handle(s));
  });
}

MpsrtStatus buffer_copy(MpsrtBuffer* dst, size_t dst_offset, const MpsrtBuffer* src,
                        size_t src_offset, size_t nbytes, MpsrtStream* s) noexcept {
  return guarded([&] {
    Buffer d = buf(dst)->view(dst_offset, nbytes);
    Buffer v = buf(src)->view(src_offset, nbytes);
    d.copy_from(v, stream_of_handle(s));
  });
}

MpsrtStatus memory_stats(int device, void (*visit)(void*, const char*, int64_t),
                         void* ctx) noexcept {
  return guarded([&] {
    for (const auto& [key, value] : mpsrt::memory_stats(device)) visit(ctx, key.c_str(), value);
  });
}

MpsrtStatus reset_peak_memory_stats(int device) noexcept {
  return guarded([&] { mpsrt::reset_peak_memory_stats(device); });
}

MpsrtStatus reset_accumulated_memory_stats(int device) noexcept {
  return guarded([&] { mpsrt::reset_accumulated_memory_stats(device); });
}

MpsrtStatus empty_cache(int device) noexcept {
  return guarded([&] { mpsrt::empty_cache(device); });
}

// streams
MpsrtStream* stream_default(int device) noexcept {
  MpsrtStream* s = nullptr;
  guarded([&] { s = handle(mpsrt::default_stream(device)); });
  return s;
}

MpsrtStream* stream_current(int device) noexcept {
  MpsrtStream* s = nullptr;
  guarded([&] { s = handle(mpsrt::current_stream(device)); });
  return s;
}

MpsrtStatus stream_from_pool(int priority, int device, MpsrtStream** out) noexcept {
  return guarded([&] { *out = handle(mpsrt::stream_from_pool(priority, device)); });
}

MpsrtStream* stream_set_current(MpsrtStream* s) noexcept {
  MpsrtStream* prev = nullptr;
  guarded([&] { prev = handle(mpsrt::set_current_stream(stream_of_handle(s))); });
  return prev;
}

int stream_device(MpsrtStream* s) noexcept {
  return stream_of_handle(s).device();
}

int stream_priority(MpsrtStream* s) noexcept {
  return stream_of_handle(s).priority();
}

MpsrtStatus stream_synchronize(MpsrtStream* s) noexcept {
  return guarded([&] { stream_of_handle(s).synchronize(); });
}

int stream_query(MpsrtStream* s) noexcept {
  bool done = false;
  auto st = guarded([&] { done = stream_of_handle(s).query(); });
  return query_to_int(st, done);
}

// events
MpsrtStatus event_create(int enable_timing, MpsrtEvent** out) noexcept {
  return guarded([&] { *out = reinterpret_cast<MpsrtEvent*>(new Event(enable_timing != 0)); });
}

void event_destroy(MpsrtEvent* e) noexcept {
  delete ev(e);
}

MpsrtStatus event_record(MpsrtEvent* e, MpsrtStream* s) noexcept {
  return guarded([&] { ev(e)->record(stream_of_handle(s)); });
}

MpsrtStatus event_wait(MpsrtEvent* e, MpsrtStream* s) noexcept {
  return guarded([&] { ev(e)->wait(stream_of_handle(s)); });
}

int event_query(MpsrtEvent* e) noexcept {
  bool done = false;
  auto st = guarded([&] { done = ev(e)->query(); });
  return query_to_int(st, done);
}

MpsrtStatus event_synchronize(MpsrtEvent* e) noexcept {
  return guarded([&] { ev(e)->synchronize(); });
}

MpsrtStatus event_elapsed_ms(MpsrtEvent* start, MpsrtEvent* end, double* ms) noexcept {
  return guarded([&] { *ms = ev(start)->elapsed_time(*ev(end)); });
}

// ---- version 2: generators and random fills
MpsrtStatus generator_create(int device, MpsrtGenerator** out) noexcept {
  return guarded([&] { *out = handle(Generator(device)); });
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
  return guarded([&] { *out = handle(gen(g, device).clone_state()); });
}

MpsrtStatus generator_manual_seed(MpsrtGenerator* g, int device, uint64_t seed) noexcept {
  return guarded([&] { gen(g, device).manual_seed(seed); });
}

MpsrtStatus generator_seed(MpsrtGenerator* g, int device, uint64_t* seed) noexcept {
  return guarded([&] { *seed = gen(g, device).seed(); });
}

MpsrtStatus generator_initial_seed(MpsrtGenerator* g, int device, uint64_t* seed) noexcept {
  return guarded([&] { *seed = gen(g, device).initial_seed(); });
}

MpsrtStatus generator_offset(MpsrtGenerator* g, int device, uint64_t* offset) noexcept {
  return guarded([&] { *offset = gen(g, device).offset(); });
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
  return guarded([&] { *out = gen(g, device).random_u64(); });
}

MpsrtStatus random_fill(MpsrtBuffer* b, size_t offset, uint64_t count, const MpsrtRandomSpec* spec,
                        MpsrtGenerator* g, MpsrtStream* s) noexcept {
  return guarded([&] {
    if (spec == nullptr) throw std::invalid_argument("[c_api] random_fill: spec is NULL");
    RandomSpec rs;
    rs.op = static_cast<RandomOp>(spec->op);
    rs.dtype = static_cast<DType>(spec->dtype);
    if (spec->op < 0 || spec->op >= kRandomOpCount || spec->dtype < 0 ||
        spec->dtype >= kDTypeCount || !mpsrt::random_supported(rs.op, rs.dtype)) {
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
      throw std::invalid_argument("[c_api] random_int_bounds: no dtype " + std::to_string(dtype));
    }
    *min = r.min;
    *max = r.max;
  });
}

// profiler
int64_t host_op_begin() noexcept {
  return mpsrt::profiler::host_op_begin();
}

void host_op_end(const char* name, MpsrtStream* s, int64_t begin) noexcept {
  guarded([&] { mpsrt::profiler::host_op_end(name ? name : "", stream_of_handle(s), begin); });
}

MpsrtStatus buffer_check_owner(const MpsrtBuffer* b) noexcept {
  return guarded([&] { buf(b)->check_owner(); });
}

MpsrtStatus mem_get_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) noexcept {
  return guarded([&] {
    const auto [f, t] = mpsrt::mem_get_info(device);
    *free_bytes = f;
    *total_bytes = t;
  });
}

// ---- version 3: the memory models
uint64_t buffer_address(const MpsrtBuffer* b) noexcept {
  return b ? buf(b)->address() : 0;
}

void* buffer_host_ptr(const MpsrtBuffer* b) noexcept {
  return b ? buf(b)->host_ptr() : nullptr;
}

MpsrtStatus buffer_copy_from_host(MpsrtBuffer* dst, size_t offset, const void* src,
                                  size_t nbytes) noexcept {
  return guarded([&] {
    if (dst == nullptr) throw std::invalid_argument("[c_api] buffer_copy_from_host: NULL buffer");
    buf(dst)->view(offset, nbytes).copy_from_host(src, nbytes);
  });
}

MpsrtStatus buffer_copy_to_host(const MpsrtBuffer* src, size_t offset, void* dst,
                                size_t nbytes) noexcept {
  return guarded([&] {
    if (src == nullptr) throw std::invalid_argument("[c_api] buffer_copy_to_host: NULL buffer");
    buf(src)->view(offset, nbytes).copy_to_host(dst, nbytes);
  });
}

// ---- version 4: tensor kernels
MpsrtStatus device_kernel_info(int device, int* cpu_type, uint64_t* arg_bytes,
                               int* setting) noexcept {
  return guarded([&] {
    const DeviceProperties p = mpsrt::get_device_properties(device);
    if (cpu_type) *cpu_type = p.cpu_type ? 1 : 0;
    if (arg_bytes) *arg_bytes = p.kernel_arg_bytes;
    if (setting) {
      *setting = MPSRT_TORCH_KERNELS_AUTO;
      for (const OptionInfo& o : mpsrt::options()) {
        if (o.name != "MPSRT_TORCH_KERNELS") continue;
        if (o.value == "device") *setting = MPSRT_TORCH_KERNELS_DEVICE;
        if (o.value == "cpu") *setting = MPSRT_TORCH_KERNELS_CPU;
      }
    }
  });
}

int kernel_index(const char* name) noexcept {
  return name != nullptr ? mpsrt::kernel_index(name) : -1;
}

MpsrtStatus kernel_launch(const MpsrtKernelLaunch* l, MpsrtStream* s) noexcept {
  return guarded([&] {
    if (l == nullptr) throw std::invalid_argument("[c_api] kernel_launch: NULL launch");
    KernelLaunch k;
    k.kernel = l->kernel;
    k.nspec = std::min<uint32_t>(l->nspec, KernelLaunch::kMaxSpec + 1);
    k.nargs = std::min<uint32_t>(l->nargs, KernelLaunch::kMaxArgs + 1);
    k.push_bytes = std::min<uint32_t>(l->push_bytes, KernelLaunch::kMaxPushBytes + 1);
    if (k.nspec > KernelLaunch::kMaxSpec || k.nargs > KernelLaunch::kMaxArgs ||
        k.push_bytes > KernelLaunch::kMaxPushBytes) {
      throw std::invalid_argument(
          "[c_api] kernel_launch: at most 16 constants, 8 arguments and 96 push bytes");
    }
    std::copy(l->spec, l->spec + k.nspec, k.spec);
    for (uint32_t i = 0; i < k.nargs; ++i) {
      k.args[i] = {buf(l->args[i].buffer), l->args[i].offset, l->args[i].nbytes,
                   l->args[i].written != 0};
    }
    std::memcpy(k.push, l->push, k.push_bytes);
    std::copy(l->groups, l->groups + 3, k.groups);
    mpsrt::launch_kernel(k, stream_of_handle(s));
  });
}

}  // namespace entry

// ------------------------------------------------------------------ the table
// Each field assigned by name from the entry of the same name: the layout and order are the
// header's alone, and an entry whose signature differs from its pointer's does not compile.
constexpr MpsrtCApi make_table() {
  MpsrtCApi t{};
  t.version = MPSRT_C_API_VERSION;
  t.size = static_cast<uint32_t>(sizeof(MpsrtCApi));
  t.last_error = entry::last_error;
  // devices
  t.backend_name = entry::backend_name;
  t.device_count = entry::device_count;
  t.current_device = entry::current_device;
  t.set_device = entry::set_device;
  t.host_visible = entry::host_visible;
  t.synchronize = entry::synchronize;
  // memory
  t.buffer_alloc = entry::buffer_alloc;
  t.buffer_free = entry::buffer_free;
  t.buffer_record_stream = entry::buffer_record_stream;
  t.buffer_fill = entry::buffer_fill;
  t.buffer_copy = entry::buffer_copy;
  t.memory_stats = entry::memory_stats;
  t.reset_peak_memory_stats = entry::reset_peak_memory_stats;
  t.reset_accumulated_memory_stats = entry::reset_accumulated_memory_stats;
  t.empty_cache = entry::empty_cache;
  // streams
  t.stream_default = entry::stream_default;
  t.stream_current = entry::stream_current;
  t.stream_from_pool = entry::stream_from_pool;
  t.stream_set_current = entry::stream_set_current;
  t.stream_device = entry::stream_device;
  t.stream_priority = entry::stream_priority;
  t.stream_synchronize = entry::stream_synchronize;
  t.stream_query = entry::stream_query;
  // events
  t.event_create = entry::event_create;
  t.event_destroy = entry::event_destroy;
  t.event_record = entry::event_record;
  t.event_wait = entry::event_wait;
  t.event_query = entry::event_query;
  t.event_synchronize = entry::event_synchronize;
  t.event_elapsed_ms = entry::event_elapsed_ms;
  // version 2: generators and random fills
  t.generator_create = entry::generator_create;
  t.generator_destroy = entry::generator_destroy;
  t.generator_device = entry::generator_device;
  t.generator_clone_state = entry::generator_clone_state;
  t.generator_manual_seed = entry::generator_manual_seed;
  t.generator_seed = entry::generator_seed;
  t.generator_initial_seed = entry::generator_initial_seed;
  t.generator_offset = entry::generator_offset;
  t.generator_set_offset = entry::generator_set_offset;
  t.generator_get_state = entry::generator_get_state;
  t.generator_set_state = entry::generator_set_state;
  t.generator_random_u64 = entry::generator_random_u64;
  t.random_fill = entry::random_fill;
  t.random_supported = entry::random_supported;
  t.random_int_bounds = entry::random_int_bounds;
  // profiler, forked children, device memory
  t.host_op_begin = entry::host_op_begin;
  t.host_op_end = entry::host_op_end;
  t.buffer_check_owner = entry::buffer_check_owner;
  t.mem_get_info = entry::mem_get_info;
  // version 3: the memory models
  t.buffer_address = entry::buffer_address;
  t.buffer_host_ptr = entry::buffer_host_ptr;
  t.buffer_copy_from_host = entry::buffer_copy_from_host;
  t.buffer_copy_to_host = entry::buffer_copy_to_host;
  // version 4: tensor kernels
  t.device_kernel_info = entry::device_kernel_info;
  t.kernel_index = entry::kernel_index;
  t.kernel_launch = entry::kernel_launch;
  return t;
}

// The last field above is the table's last: a field added to the header fails here until it
// has its entry (and this line names it).
static_assert(offsetof(MpsrtCApi, kernel_launch) + sizeof(MpsrtCApi::kernel_launch) ==
                  sizeof(MpsrtCApi),
              "MpsrtCApi has a field after kernel_launch: give it an entry in make_table");

constexpr MpsrtCApi kApi = make_table();

}  // namespace

void init_c_api(nb::module_& m) {
  m.attr("_c_api") = nb::capsule(&kApi, MPSRT_C_API_CAPSULE_NAME);
  m.attr("_c_api_version") = MPSRT_C_API_VERSION;
}

}  // namespace mpsrt::python
