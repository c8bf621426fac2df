// Test-only stand-in for Apple's <os/signpost.h> (see Foundation/Foundation.h): the signpost
// ids, types and calls the metal backend's os_signpost sink uses, with the SDK's types, values
// and macro shapes. The emit macros check the name and format (string literals) and the format
// against its arguments at compile time, through <os/log.h>'s OS_LOG_CALL_WITH_FORMAT_NAME.
#pragma once

#include <os/log.h>

// Any 64-bit value but the NULL (signposts off) and INVALID (an error) ids can name an
// interval; EXCLUSIVE is for intervals of a name that never overlap.
typedef uint64_t os_signpost_id_t;
#define OS_SIGNPOST_ID_NULL ((os_signpost_id_t)0)
#define OS_SIGNPOST_ID_INVALID ((os_signpost_id_t)~0)
#define OS_SIGNPOST_ID_EXCLUSIVE ((os_signpost_id_t)0xEEEEB0B5B2B2EEEE)

// The category whose signposts Instruments shows as points of interest.
#define OS_LOG_CATEGORY_POINTS_OF_INTEREST "PointsOfInterest"

OS_ENUM(os_signpost_type, uint8_t, OS_SIGNPOST_EVENT = 0x00, OS_SIGNPOST_INTERVAL_BEGIN = 0x01,
        OS_SIGNPOST_INTERVAL_END = 0x02, );

#ifdef __cplusplus
extern "C" {
#endif
OS_ASSUME_NONNULL_BEGIN

OS_EXPORT OS_NOTHROW OS_WARN_RESULT os_signpost_id_t os_signpost_id_generate(os_log_t log);

OS_EXPORT OS_NOTHROW OS_PURE OS_WARN_RESULT bool os_signpost_enabled(os_log_t log);

OS_EXPORT OS_NOTHROW OS_NOT_TAIL_CALLED void _os_signpost_emit_with_name_impl(
    void* dso, os_log_t log, os_signpost_type_t type, os_signpost_id_t spid, const char* name,
    const char* format, uint8_t* buf, uint32_t size);

OS_ASSUME_NONNULL_END
#ifdef __cplusplus
}
#endif

// os_signpost_{interval_begin,interval_end,event_emit}(log, id, name[, format, args...]):
// nothing is formatted unless the id is valid and signposts of `log` are on.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wgnu-zero-variadic-macro-arguments"
#define _os_signpost_emit_with_type(emitfn, log, type, spid, name, ...)                        \
  __extension__({                                                                              \
    os_log_t _sp_log = (log);                                                                  \
    os_signpost_type_t _sp_type = (type);                                                      \
    os_signpost_id_t _sp_id = (spid);                                                          \
    if (_sp_id != OS_SIGNPOST_ID_NULL && _sp_id != OS_SIGNPOST_ID_INVALID &&                   \
        os_signpost_enabled(_sp_log)) {                                                        \
      OS_LOG_CALL_WITH_FORMAT_NAME((emitfn), (&__dso_handle, _sp_log, _sp_type, _sp_id), name, \
                                   "" __VA_ARGS__);                                            \
    }                                                                                          \
  })
#define os_signpost_emit_with_type(log, type, spid, name, ...)                         \
  _os_signpost_emit_with_type(_os_signpost_emit_with_name_impl, log, type, spid, name, \
                              ##__VA_ARGS__)
#define os_signpost_interval_begin(log, interval_id, name, ...) \
  os_signpost_emit_with_type(log, OS_SIGNPOST_INTERVAL_BEGIN, interval_id, name, ##__VA_ARGS__)
#define os_signpost_interval_end(log, interval_id, name, ...) \
  os_signpost_emit_with_type(log, OS_SIGNPOST_INTERVAL_END, interval_id, name, ##__VA_ARGS__)
#define os_signpost_event_emit(log, event_id, name, ...) \
  os_signpost_emit_with_type(log, OS_SIGNPOST_EVENT, event_id, name, ##__VA_ARGS__)
#pragma clang diagnostic pop
