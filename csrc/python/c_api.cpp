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
#include "mpsrt/stream.h"
#include "python/bindings.h"

namespace mpsrt::python {
namespace {

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
detail::StreamImpl* impl(MpsrtStream* s) {
  return reinterpret_cast<detail::StreamImpl*>(s);
}
MpsrtStream* handle(const Stream& s) {
  return reinterpret_cast<MpsrtStream*>(s.impl());
}
Event* ev(MpsrtEvent* e) {
  return reinterpret_cast<Event*>(e);
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
      return guarded([&] { buf(b)->record_stream(Stream(impl(s))); });
    },
    [](MpsrtBuffer* b, size_t offset, size_t nbytes, uint64_t pattern, unsigned pattern_size,
       MpsrtStream* s) noexcept {
      return guarded([&] {
        Buffer v = buf(b)->view(offset, nbytes);
        v.fill(pattern, pattern_size, Stream(impl(s)));
      });
    },
    [](MpsrtBuffer* dst, size_t dst_offset, const MpsrtBuffer* src, size_t src_offset,
       size_t nbytes, MpsrtStream* s) noexcept {
      return guarded([&] {
        Buffer d = buf(dst)->view(dst_offset, nbytes);
        Buffer v = buf(src)->view(src_offset, nbytes);
        d.copy_from(v, Stream(impl(s)));
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
      guarded([&] { prev = handle(set_current_stream(Stream(impl(s)))); });
      return prev;
    },
    [](MpsrtStream* s) noexcept -> int { return Stream(impl(s)).device(); },
    [](MpsrtStream* s) noexcept -> int { return Stream(impl(s)).priority(); },
    [](MpsrtStream* s) noexcept { return guarded([&] { Stream(impl(s)).synchronize(); }); },
    [](MpsrtStream* s) noexcept -> int {
      bool done = false;
      auto st = guarded([&] { done = Stream(impl(s)).query(); });
      return query_to_int(st, done);
    },
    // events
    [](int enable_timing, MpsrtEvent** out) noexcept {
      return guarded([&] { *out = reinterpret_cast<MpsrtEvent*>(new Event(enable_timing != 0)); });
    },
    [](MpsrtEvent* e) noexcept { delete ev(e); },
    [](MpsrtEvent* e, MpsrtStream* s) noexcept {
      return guarded([&] { ev(e)->record(Stream(impl(s))); });
    },
    [](MpsrtEvent* e, MpsrtStream* s) noexcept {
      return guarded([&] { ev(e)->wait(Stream(impl(s))); });
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
};

}  // namespace

void init_c_api(nb::module_& m) {
  m.attr("_c_api") = nb::capsule(&kApi, MPSRT_C_API_CAPSULE_NAME);
  m.attr("_c_api_version") = MPSRT_C_API_VERSION;
}

}  // namespace mpsrt::python
