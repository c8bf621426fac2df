// The host's access to mpsrt tensors in both memory models (mpsrt's
// DeviceProperties::unified_memory). Unified: a storage's data pointer is the host address of
// the memory, and a CPU tensor can alias it. Discrete: the data pointer is the memory's device
// address, which the host cannot dereference; what the host reads or writes is a copy through
// mpsrt's staging path (C API buffer_copy_to_host / buffer_copy_from_host).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/MaybeOwned.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "device/runtime_client.h"

namespace mpsrt::torch_glue {

inline bool is_mpsrt(const at::Tensor& t) {
  return t.defined() && t.device().type() == kDev;
}

// True where the host addresses the storage's memory: mpsrt memory on unified memory, or memory
// that is not mpsrt's. Cost: one C API call for an mpsrt storage.
bool host_visible(const c10::Storage& st);

// The mpsrt buffer under t's storage and the byte offset of t's first element in it (the data
// pointer is the buffer's host or device address plus that offset); nullptr when the storage is
// not mpsrt memory.
MpsrtBuffer* buffer_of(const at::Tensor& t, size_t* offset);

// A CPU tensor over the same bytes as an mpsrt tensor (sizes, strides, offset and dtype kept;
// its storage is the whole device storage, not owned). Resizable: a CPU kernel that resizes an
// out= argument reallocates it in CPU memory, and the fallback copies the result back.
at::Tensor cpu_alias(const at::Tensor& t);

// A CPU stand-in of t for a CPU kernel that only reads it or writes its elements (no resize, no
// new geometry): the one kept with t where it still fits t (the same bytes, dtype and geometry,
// made in runtime generation `generation`: api().runtime_generation()), else cpu_alias(t), which
// is kept with t for its next op where t is a plain tensor that has none (not a view: views are
// made per op and used once). Made once, a tensor's stand-in costs its op a few compares instead
// of a CPU TensorImpl and StorageImpl made and freed.
c10::MaybeOwned<at::Tensor> kept_stand_in(const at::Tensor& t, uint64_t generation);

// Keeps `cpu` (a CPU tensor over t's bytes with t's geometry: the CPU result that t's memory was
// handed over from) as t's stand-in; t is new (no other thread has it) and has none.
void keep_stand_in(const at::Tensor& t, at::Tensor cpu);

// A tensor on the storage `storage` with another tensor's geometry (a view), with `keys`.
at::Tensor view_on(const c10::Storage& storage, const at::Tensor& geometry,
                   c10::DispatchKeySet keys);

// Where a tensor made over a storage is: on the CPU (a stand-in for a CPU kernel) or on the
// mpsrt device.
enum class On { kCpu, kDevice };
// A tensor over `storage` with t's dtype (no geometry set: sizes [0]): a plain TensorImpl, or
// for a quantized t a QTensorImpl with t's quantizer (for the CPU, its per-channel scales and
// zero points as CPU tensors). Its keys: `view_keys` for a view (torch's VIEW kind), else the
// backend's (CPU / PrivateUse1, or their quantized keys).
at::Tensor make_over(c10::Storage storage, const at::Tensor& t, On on,
                     std::optional<c10::DispatchKeySet> view_keys = std::nullopt);

// Discrete memory: what the host reads or writes of an mpsrt tensor is a copy of the bytes the
// tensor spans (from its first element to its last), through mpsrt's staging path; dense
// tensors move exactly their bytes, strided ones their span (the gaps are read and written back
// unchanged).
struct HostSpan {
  at::Tensor view;   // CPU tensor with the mpsrt tensor's sizes, strides and dtype over `bytes`
  at::Tensor bytes;  // the span's bytes
  MpsrtBuffer* buffer = nullptr;
  size_t offset = 0;  // of the span (the tensor's first element) in the buffer
  size_t nbytes = 0;
};

HostSpan read_span(const at::Tensor& t);
// Bytes [lo, hi) of an mpsrt storage (its view: those bytes), in a host storage that a kernel
// may resize only where `resizable` (where the views of several tensors share it, a kernel must
// not move it under them).
HostSpan read_storage_bytes(const c10::Storage& st, size_t lo, size_t hi, bool resizable = false);
void write_span(const HostSpan& h);

// t's values as a CPU tensor: an alias on unified memory (after the current stream's work), a
// host copy on discrete memory.
at::Tensor host_values(const at::Tensor& t);

// Writes `values` (a CPU tensor, broadcast and converted as copy_ does) into the mpsrt tensor
// dst, after the device's queued work.
void write_values(const at::Tensor& dst, const at::Tensor& values);

// Runs f on a CPU tensor standing for t and keeps what f writes: the alias on unified memory
// (after the current stream's work), a host copy written back on discrete memory.
template <class F>
void update_on_host(const at::Tensor& t, F&& f) {
  if (host_visible(t.storage())) {
    sync_current(t.device().index());
    f(cpu_alias(t));
    return;
  }
  HostSpan h = read_span(t);
  f(h.view);
  write_span(h);
}

}  // namespace mpsrt::torch_glue
