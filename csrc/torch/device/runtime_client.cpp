// The glue's access to mpsrt's C API table: see runtime.h.
#include "device/runtime_client.h"

#include <string>

namespace mpsrt::torch_glue {

const MpsrtCApi* g_api = nullptr;

void use_table(const MpsrtCApi* table) {
  TORCH_CHECK(table != nullptr && table->version >= 6 && table->size >= sizeof(MpsrtCApi),
              "[torch] mpsrt's C API table is older than this glue (version ",
              table ? table->version : 0, ", need 6); reinstall mpsrt");
  g_api = table;
}

void raise_status(MpsrtStatus st) {
  std::string msg = api().last_error();
  TORCH_CHECK_WITH(OutOfMemoryError, st != MPSRT_ERR_OOM, msg);
  TORCH_CHECK_VALUE(st != MPSRT_ERR_VALUE, msg);
  TORCH_CHECK(false, msg);
}

c10::DeviceIndex current_index() {
  const int d = api().current_device();
  // 0 with an error when the runtime cannot start (e.g. a forked child): mpsrt's reason.
  TORCH_CHECK(d != 0 || *api().last_error() == '\0', api().last_error());
  return static_cast<c10::DeviceIndex>(d);
}

MpsrtStream* current_stream(c10::DeviceIndex d) {
  MpsrtStream* s = api().stream_current(d);
  TORCH_CHECK(s != nullptr, api().last_error());
  return s;
}

void check_index(c10::DeviceIndex d) {
  int n = api().device_count();
  // No devices because the runtime cannot start (e.g. a forked child): mpsrt's reason.
  TORCH_CHECK(n > 0 || *api().last_error() == '\0', api().last_error());
  // A RuntimeError, as CUDA's "invalid device ordinal" (torch's device-generic tests expect it).
  TORCH_CHECK(d >= 0 && d < n, "The device index is out of range. It must be in [0, ", n,
              "), but got ", static_cast<int>(d), ".");
}

c10::Stream torch_stream(MpsrtStream* s) {
  TORCH_CHECK(s != nullptr, api().last_error());
  auto d = static_cast<c10::DeviceIndex>(api().stream_device(s));
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, d),
                     static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(s)));
}

void sync_current(c10::DeviceIndex d) {
  int64_t begin = 0;  // (the profiler's start time: nothing is recorded for a bare wait)
  check(api().host_op_enter(d, &begin));  // a few loads while every stream is idle
}

}  // namespace mpsrt::torch_glue
