// Test-only stand-in for Apple's <os/log.h> (see Foundation/Foundation.h): what the metal
// backend's os_signpost sink uses. os_log_t is an ARC-managed Objective-C object type, as
// Apple's OS_OBJECT_DECL(os_log) makes it when Objective-C is on; the attributes and the
// helper that formats a message (Apple's <os/trace_base.h>) keep the SDK's shapes, so clang
// checks each format string against its arguments as it does on Apple.
#pragma once

#import <Foundation/Foundation.h>  // NSObject, which <os/object.h> brings in on Apple

#include <stdbool.h>
#include <stdint.h>

#define OS_EXPORT extern __attribute__((__visibility__("default")))
#define OS_NOTHROW __attribute__((__nothrow__))
#define OS_WARN_RESULT __attribute__((__warn_unused_result__))
#define OS_PURE __attribute__((__pure__))
#define OS_NONNULL_ALL __attribute__((__nonnull__))
#define OS_NOT_TAIL_CALLED __attribute__((__not_tail_called__))
#define OS_OBJECT_RETURNS_RETAINED __attribute__((__ns_returns_retained__))
#define OS_ASSUME_NONNULL_BEGIN _Pragma("clang assume_nonnull begin")
#define OS_ASSUME_NONNULL_END _Pragma("clang assume_nonnull end")
// An enum type `name_t` with a fixed underlying type, as <os/base.h> declares it for C++11
// and Objective-C: no implicit conversion from an integer in C++.
#define OS_ENUM(name, type, ...) typedef enum : type { __VA_ARGS__ } name##_t

// OS_OBJECT_DECL(os_log): a protocol adopted by the log class, and a pointer to an NSObject
// that conforms to it. ARC retains and releases it like any object.
@protocol OS_os_log <NSObject>
@end
typedef NSObject<OS_os_log>* __attribute__((objc_independent_class)) os_log_t;

#ifdef __cplusplus
extern "C" {
#endif

// The image the caller belongs to; the emit functions take its address.
struct mach_header;
extern struct mach_header __dso_handle;

OS_EXPORT OS_NOTHROW OS_WARN_RESULT OS_OBJECT_RETURNS_RETAINED OS_NONNULL_ALL os_log_t
os_log_create(const char* subsystem, const char* category);

#ifdef __cplusplus
}
#endif

// Names and formats must be string literals (Apple keeps them in a section of their own).
#ifdef __cplusplus
#define OS_LOG_STRING_CHECK(s)           \
  static_assert(__builtin_constant_p(s), \
                "format/label/description argument must be a string constant")
#else
#define OS_LOG_STRING_CHECK(s)            \
  _Static_assert(__builtin_constant_p(s), \
                 "format/label/description argument must be a string constant")
#endif

#define OS_LOG_REMOVE_PARENS(...) __VA_ARGS__

// Calls fun(fun_args..., name, fmt, buffer, size) with the arguments encoded by clang's
// __builtin_os_log_format, which checks fmt against them (-Wformat). The GNU comma pasting is
// Apple's shape; it would warn under -Wpedantic at this definition (on Apple this is a system
// header), so only that warning is silenced here, for these definitions.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wgnu-zero-variadic-macro-arguments"
#define OS_LOG_CALL_WITH_FORMAT_NAME(fun, fun_args, name, fmt, ...)              \
  __extension__({                                                                \
    OS_LOG_STRING_CHECK(fmt);                                                    \
    OS_LOG_STRING_CHECK(name);                                                   \
    uint8_t _os_log_buf[__builtin_os_log_format_buffer_size(fmt, ##__VA_ARGS__)] \
        __attribute__((aligned(16)));                                            \
    fun(OS_LOG_REMOVE_PARENS fun_args, name, fmt,                                \
        (uint8_t*)__builtin_os_log_format(_os_log_buf, fmt, ##__VA_ARGS__),      \
        (uint32_t)sizeof(_os_log_buf));                                          \
  })
#pragma clang diagnostic pop
