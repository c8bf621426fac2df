/* MPSRT_API: the symbol visibility of the library's public entry points. Plain preprocessor,
 * valid in C and C++ (mpsrt/api.h and the C API's mpsrt/c_api.h include it). */
#ifndef MPSRT_VISIBILITY_H
#define MPSRT_VISIBILITY_H

#if defined(_WIN32)
#define MPSRT_API
#else
#define MPSRT_API __attribute__((visibility("default")))
#endif

#endif
