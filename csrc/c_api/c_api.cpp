// mpsrt's C API (include/mpsrt/c_api.h): the table over this process's runtime, returned by
// mpsrt_c_api(). A C program calls it directly; the extension module mpsrt._C exports the same
// table as the capsule mpsrt._C._c_api, which the PyTorch device glue (csrc/torch) reads, so
// that the process keeps one runtime. Each entry lives in its area's file (internal.h) and
// translates C++ exceptions to an MpsrtStatus and a per-thread message.
#include <cstddef>
#include <string>

#include "c_api/internal.h"
#include "mpsrt/c_api.h"
#include "mpsrt/dtype.h"
#include "mpsrt/generator.h"

namespace mpsrt::c_api {
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

// The last field of the header's table is host_op_enter: a field added to the header fails
// here until its area's fill_<area>() sets it (and this line names it).
static_assert(offsetof(MpsrtCApi, host_op_enter) + sizeof(MpsrtCApi::host_op_enter) ==
                  sizeof(MpsrtCApi),
              "MpsrtCApi has a field after host_op_enter: set it in its area's fill_<area>()");

const char* last_error() noexcept {
  return last_error_text().c_str();
}

MpsrtCApi make_table() {
  MpsrtCApi t{};
  t.version = MPSRT_C_API_VERSION;
  t.size = static_cast<uint32_t>(sizeof(MpsrtCApi));
  t.last_error = last_error;
  fill_device(t);
  fill_buffer(t);
  fill_stream(t);
  fill_random(t);
  return t;
}

}  // namespace

namespace {
std::string& error_text() noexcept {
  thread_local std::string text;
  return text;
}
// Whether error_text() is not empty: trivially destructible, so a success reads it without the
// guard a thread_local std::string costs per use.
thread_local bool t_error_set = false;
}  // namespace

const std::string& last_error_text() noexcept {
  return error_text();
}

void set_last_error(const char* what) noexcept {
  error_text() = what;
  t_error_set = true;
}

void clear_last_error() noexcept {
  if (MPSRT_UNLIKELY(t_error_set)) {
    error_text().clear();
    t_error_set = false;
  }
}

void throw_null(const char* fn, const char* what) {
  throw std::invalid_argument(std::string("[c_api] ") + fn + ": " + what +
                              " is NULL; pass a handle that the C API made");
}

}  // namespace mpsrt::c_api

extern "C" const MpsrtCApi* mpsrt_c_api(void) {
  // Made once, on the first call (thread-safe); no runtime starts until an entry needs one.
  static const MpsrtCApi table = mpsrt::c_api::make_table();
  return &table;
}
