// The glue's one door to the runtime: mpsrt's C API table (include/mpsrt/c_api.h), taken by
// `_init` (module.cpp), and the helpers every other part of the glue uses over it: mpsrt's
// errors as torch's, device indices, and mpsrt streams as torch.Streams.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <cstdint>

#include "mpsrt/c_api.h"

namespace mpsrt::torch_glue {

constexpr auto kDev = c10::DeviceType::PrivateUse1;

// The table `_init` was given; nullptr before (the deleters and noexcept guard entries test it
// themselves, everything else goes through api()).
extern const MpsrtCApi* g_api;

// Checks the table's version and size and keeps it (module.cpp's _init).
void use_table(const MpsrtCApi* table);

inline const MpsrtCApi& api() {
  TORCH_CHECK(g_api != nullptr,
              "[torch] the mpsrt device is not initialised; `import mpsrt.torch` first");
  return *g_api;
}

// Maps an mpsrt failure to torch's error types (OOM -> torch.OutOfMemoryError, bad value ->
// ValueError, else RuntimeError), keeping mpsrt's message.
[[noreturn]] void raise_status(MpsrtStatus st);

// Cost: one compare; the failure path is out of line.
inline void check(MpsrtStatus st) {
  if (C10_UNLIKELY(st != MPSRT_OK)) raise_status(st);
}

c10::DeviceIndex current_index();
// The device's current stream (raises mpsrt's error when there is none to give).
MpsrtStream* current_stream(c10::DeviceIndex d);
void check_index(c10::DeviceIndex d);

// torch.Stream <-> mpsrt stream: a torch.Stream's id is the mpsrt stream handle.
inline MpsrtStream* stream_of(const c10::Stream& s) {
  return reinterpret_cast<MpsrtStream*>(static_cast<intptr_t>(s.id()));
}
c10::Stream torch_stream(MpsrtStream* s);

// Work queued on the device's current stream completes before the host touches its memory.
void sync_current(c10::DeviceIndex d);

}  // namespace mpsrt::torch_glue
