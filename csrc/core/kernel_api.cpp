// The public tensor-kernel API (mpsrt/kernel.h): names from the kernel library, launches checked
// and encoded on a stream.
#include <string>

#include "core/access.h"
#include "core/allocator/caching_allocator.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/error.h"
#include "mpsrt/kernel.h"

namespace mpsrt {
namespace backend {

const std::vector<std::string_view>& kernel_names() {
  static const std::vector<std::string_view> names = {
#define MPSRT_KERNEL(name) #name,
#include "kernel_list.inc"
#undef MPSRT_KERNEL
  };
  return names;
}

}  // namespace backend

std::vector<std::string> kernel_names() {
  const auto& names = backend::kernel_names();
  return {names.begin(), names.end()};
}

int kernel_index(std::string_view name) noexcept {
  const auto& names = backend::kernel_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

[[noreturn]] MPSRT_COLD void bad_launch(const KernelLaunch& k, const std::string& what) {
  const auto& names = backend::kernel_names();
  const std::string name = k.kernel >= 0 && size_t(k.kernel) < names.size()
                               ? std::string(names[size_t(k.kernel)])
                               : "#" + std::to_string(k.kernel);
  detail::throw_invalid("[kernel] launch of " + name + ": " + what);
}

// The launch's counts, grid and argument spans are acceptable for `device`.
void check_launch(const KernelLaunch& k, const backend::DeviceInfo& p, int device) {
  if (k.kernel < 0 || size_t(k.kernel) >= backend::kernel_names().size()) {
    bad_launch(k, "no such kernel; use kernel_index(name) of a kernel in kernel_names()");
  }
  if (k.nargs > KernelLaunch::kMaxArgs || k.nspec > KernelLaunch::kMaxSpec ||
      k.push_bytes > KernelLaunch::kMaxPushBytes) {
    bad_launch(k, "at most 8 arguments, 16 constants and 96 push-constant bytes, got " +
                      std::to_string(k.nargs) + ", " + std::to_string(k.nspec) + " and " +
                      std::to_string(k.push_bytes));
  }
  for (uint32_t g : k.groups) {
    if (g == 0 || g > 65535) {
      bad_launch(k, "a grid dimension of " + std::to_string(g) +
                        " workgroups; each must be from 1 to 65535");
    }
  }
  if (p.kernel_arg_bytes == 0) {
    detail::throw_error("[kernel] device " + std::to_string(device) + " (" + p.name +
                        ") runs no tensor kernels; run the operation on the host instead");
  }
  for (uint32_t i = 0; i < k.nargs; ++i) {
    const KernelArg& a = k.args[i];
    const auto which = [i] { return "argument " + std::to_string(i); };  // errors only
    if (a.buffer == nullptr || !a.buffer->defined()) bad_launch(k, which() + " has no Buffer");
    a.buffer->check_owner();
    if (a.buffer->device() != device) {
      bad_launch(k, which() + " is on device " + std::to_string(a.buffer->device()) +
                        " but the stream on device " + std::to_string(device));
    }
    if (a.nbytes == 0 || a.offset > a.buffer->nbytes() ||
        a.nbytes > a.buffer->nbytes() - a.offset) {
      bad_launch(k, which() + " spans bytes [" + std::to_string(a.offset) + ", " +
                        std::to_string(a.offset + a.nbytes) + ") of a Buffer of " +
                        std::to_string(a.buffer->nbytes()) +
                        "; it must be a non-empty range "
                        "inside the Buffer");
    }
    if (a.nbytes > p.kernel_arg_bytes) {
      bad_launch(k, which() + " spans " + std::to_string(a.nbytes) + " bytes; the device binds " +
                        std::to_string(p.kernel_arg_bytes) + " at most (split the work)");
    }
  }
}

}  // namespace

// Cost: the checks (a few compares per argument), then one encode.
void launch_kernel(const KernelLaunch& k, const Stream& stream) {
  stream.check_owner();
  detail::StreamImpl* const s = detail::Access::impl(stream);
  if (s == nullptr) detail::throw_invalid("[kernel] launch on an empty Stream");
  const int device = stream.device();
  check_launch(k, detail::Runtime::get().device(device).backend_device().info(), device);
  backend::KernelLaunch b;
  b.kernel = static_cast<uint32_t>(k.kernel);
  b.nspec = k.nspec;
  std::copy(k.spec, k.spec + k.nspec, b.spec);
  b.nargs = k.nargs;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < k.nargs; ++i) {
    const Buffer& buf = *k.args[i].buffer;
    detail::Block* const block = detail::Access::block(buf);
    // A command on another stream makes that stream a user of the memory (cross-stream safety).
    if (s != block->stream) const_cast<Buffer&>(buf).record_stream(stream);  // not a change of buf
    b.args[i].ref = {block->heap->heap.get(), block->offset + buf.offset() + k.args[i].offset};
    b.args[i].nbytes = k.args[i].nbytes;
    b.args[i].written = k.args[i].written;
    if (k.args[i].written) bytes += k.args[i].nbytes;
  }
  b.push_bytes = k.push_bytes;
  std::copy(k.push, k.push + k.push_bytes, b.push);
  std::copy(k.groups, k.groups + 3, b.groups);
  const uint64_t id = k.nargs > 0 ? k.args[0].buffer->address() : 0;
  s->encode({detail::prof::Op::Kernel, bytes, id},
            [&](backend::CommandBuffer& cb) { cb.dispatch(b); });
}

}  // namespace mpsrt
