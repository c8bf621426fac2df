// mpsrt public API: export macro, branch hints, version.
#pragma once

#include "mpsrt/visibility.h"

#if defined(__GNUC__) || defined(__clang__)
#define MPSRT_LIKELY(x) __builtin_expect(!!(x), 1)
#define MPSRT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MPSRT_COLD __attribute__((cold, noinline))
#else
#define MPSRT_LIKELY(x) (x)
#define MPSRT_UNLIKELY(x) (x)
#define MPSRT_COLD
#endif

/// mpsrt's public C++ API (`#include <mpsrt/mpsrt.h>`, link `mpsrt::mpsrt`): devices, Buffers
/// and the caching allocator, streams, events, generators and random fills, tensor kernels,
/// dtypes, options and errors. Internals live in mpsrt::detail, which is not part of the API.
namespace mpsrt {

/// The library version, "MAJOR.MINOR.PATCH" (the project() version in CMakeLists.txt).
MPSRT_API const char* version() noexcept;

}  // namespace mpsrt
