// What the C API's files share (csrc/c_api/, not installed): the error translation of every
// entry, the handle conversions, and one fill_<area>() per file that sets that area's fields
// of the table (c_api.cpp assembles it). The entries call the public C++ API only.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "mpsrt/allocator.h"
#include "mpsrt/c_api.h"
#include "mpsrt/error.h"
#include "mpsrt/event.h"
#include "mpsrt/generator.h"
#include "mpsrt/stream.h"

namespace mpsrt::c_api {

/// The calling thread's last error message (the table's last_error()): set_last_error() after a
/// failure, clear_last_error() after a success (one thread-local load while it is empty).
const std::string& last_error_text() noexcept;
void set_last_error(const char* what) noexcept;
void clear_last_error() noexcept;

/// Runs f: MPSRT_OK and an empty message, or the exception turned into a status and its
/// message kept for last_error(). Cost: one try block and a thread-local load on success.
template <class F>
MpsrtStatus guarded(F&& f) noexcept {
  try {
    std::forward<F>(f)();
    clear_last_error();
    return MPSRT_OK;
  } catch (const OutOfMemory& e) {
    set_last_error(e.what());
    return MPSRT_ERR_OOM;
  } catch (const std::invalid_argument& e) {
    set_last_error(e.what());
    return MPSRT_ERR_VALUE;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return MPSRT_ERR_RUNTIME;
  } catch (...) {
    set_last_error("[c_api] unknown C++ exception; report it as an mpsrt bug");
    return MPSRT_ERR_RUNTIME;
  }
}

/// Throws std::invalid_argument("[c_api] <fn>: <what> is NULL; ...") when p is NULL.
[[noreturn]] void throw_null(const char* fn, const char* what);
template <class T>
T* need(T* p, const char* fn, const char* what) {
  if (p == nullptr) throw_null(fn, what);
  return p;
}

// Handles: a buffer handle is a Buffer*, an event handle an Event*, a generator handle a
// Generator*; a stream handle is the Stream's opaque handle() value, as a pointer.
inline Buffer* buf(MpsrtBuffer* b) {
  return reinterpret_cast<Buffer*>(b);
}
inline const Buffer* buf(const MpsrtBuffer* b) {
  return reinterpret_cast<const Buffer*>(b);
}
inline Stream stream_of_handle(MpsrtStream* s) {
  return Stream::from_handle(reinterpret_cast<uintptr_t>(s));
}
inline MpsrtStream* handle(const Stream& s) {
  return reinterpret_cast<MpsrtStream*>(s.handle());
}
inline Event* ev(MpsrtEvent* e) {
  return reinterpret_cast<Event*>(e);
}

/// 1: done, 0: not yet, -1: failed (last_error): stream_query's and event_query's answer.
inline int query_to_int(MpsrtStatus st, bool done) {
  return st == MPSRT_OK ? (done ? 1 : 0) : -1;
}

// One per file: sets the fields of its area, each from the entry of the same name and type.
void fill_device(MpsrtCApi& t);  // device.cpp: devices, memory statistics, kernels
void fill_buffer(MpsrtCApi& t);  // buffer.cpp: buffers and host copies
void fill_stream(MpsrtCApi& t);  // stream.cpp: streams, events, the profiler's host ops
void fill_random(MpsrtCApi& t);  // random.cpp: generators and random fills

}  // namespace mpsrt::c_api
