// Tensor kernels: mpsrt's library of GPU compute kernels (csrc/kernels/, written once for the
// GPU backends) run on a stream over Buffers, for the frameworks above mpsrt (the PyTorch
// device's operators). A device runs them when DeviceProperties::kernel_arg_bytes is not 0.
//
// A kernel is named by its file (csrc/kernels/<name>.comp) and launched by index. What a
// kernel reads from its arguments, specialisation constants and push constants is documented
// in its source; the runtime checks only what keeps the device safe: the arguments lie inside
// their Buffers, belong to the stream's device, and fit the device's binding limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mpsrt/allocator.h"
#include "mpsrt/stream.h"

namespace mpsrt {

/// One argument: the bytes [offset, offset + nbytes) of a Buffer (offset relative to the
/// Buffer), bound as the kernel's storage buffer of the argument's index. `written`: the kernel
/// may write them (the stream orders later readers after it).
struct KernelArg {
  const Buffer* buffer = nullptr;  ///< the Buffer (on the stream's device)
  size_t offset = 0;               ///< the first byte, relative to the Buffer
  size_t nbytes = 0;               ///< bytes of the range (at least 1)
  bool written = false;            ///< the kernel may write the range
};

/// A kernel launch. Push-constant bytes [0, 32) of the kernel hold, per argument, its first
/// byte's offset inside its binding (set by the runtime); bytes [32, 32 + push_bytes) are
/// `push`. Specialisation constants 0 .. nspec - 1 are `spec`.
struct KernelLaunch {
  static constexpr uint32_t kMaxArgs = 8;        ///< the most arguments of a launch
  static constexpr uint32_t kMaxSpec = 16;       ///< the most specialisation constants
  static constexpr uint32_t kMaxPushBytes = 96;  ///< the most bytes of `push`
  int kernel = -1;                               ///< kernel_index(name)
  uint32_t nspec = 0;                            ///< specialisation constants used (<= kMaxSpec)
  uint32_t spec[kMaxSpec] = {};                  ///< the specialisation constants' values
  uint32_t nargs = 0;                            ///< arguments used (<= kMaxArgs)
  KernelArg args[kMaxArgs] = {};                 ///< the arguments, by binding index
  uint32_t push_bytes = 0;                       ///< bytes of `push` used (<= kMaxPushBytes)
  alignas(8) unsigned char push[kMaxPushBytes] = {};  ///< push-constant bytes [32, 32 + push_bytes)
  uint32_t groups[3] = {1, 1, 1};                     ///< workgroups in x, y, z
};

/// The kernels of the library, in index order.
MPSRT_API std::vector<std::string> kernel_names();
/// The index of the kernel `name`, or -1 when the library has none of that name.
MPSRT_API int kernel_index(std::string_view name) noexcept;
/// Encodes the launch on `stream` (after the work encoded there before it). Throws
/// std::invalid_argument for a bad launch (unknown kernel, too many arguments or constants, an
/// argument outside its Buffer, on another device, or larger than the device's
/// kernel_arg_bytes, a grid of no or more than 65535 workgroups in a dimension) and mpsrt::Error
/// when the device runs no tensor kernels; nothing is encoded then.
MPSRT_API void launch_kernel(const KernelLaunch& launch, const Stream& stream);

}  // namespace mpsrt
