/* mpsrt's C API: a versioned table of C function pointers over the process's ONE runtime. It is
 * part of the library (csrc/c_api/, in the static library mpsrt::mpsrt): a C or C++ program
 * that links the library calls mpsrt_c_api() (below) and goes through the table, with no
 * Python. The extension module mpsrt._C exports the same table as the PyCapsule
 * `mpsrt._C._c_api` (capsule name MPSRT_C_API_CAPSULE_NAME): code that lives in another shared
 * library in the same process (the PyTorch device glue, mpsrt/torch) includes only this
 * header, takes the table from the capsule and calls through it, so no second copy of the core
 * (allocator, streams, generators, profiler) is ever loaded. (mpsrt._C keeps its symbols to
 * itself, mpsrt_c_api among them: the capsule is the way into its runtime.)
 *
 * Compatibility: the table only grows. `version` is MPSRT_C_API_VERSION of the mpsrt that
 * made it and `size` is sizeof(MpsrtCApi) there; a caller checks version >= the version it
 * was written for (and size >= the offset of the last member it uses).
 *
 * Version 3 adds the discrete memory model's entries: buffer addresses and staged host copies.
 * Version 4 adds the tensor kernels (mpsrt/kernel.h): device facts, kernel names, launches.
 * Version 5 adds runtime_generation, which says when cached device facts went stale.
 *
 * Errors: functions that can fail return an MpsrtStatus; on failure the message
 * ("[component] what happened; what to do") is kept per thread and read with last_error().
 * A NULL handle or out-pointer where one is needed is MPSRT_ERR_VALUE, with a message.
 * Handles are opaque: a buffer handle owns one mpsrt::Buffer (freeing is stream-ordered, as
 * for Buffers); a stream handle is stable for the life of the process (its value is also the
 * stream's identity for torch.Stream); an event handle owns one mpsrt::Event.
 */
#ifndef MPSRT_C_API_H
#define MPSRT_C_API_H

#include <stddef.h>
#include <stdint.h>

#include "mpsrt/dtype_ids.h"
#include "mpsrt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MPSRT_C_API_VERSION 5
#define MPSRT_C_API_CAPSULE_NAME "mpsrt._C._c_api"

typedef enum MpsrtStatus {
  MPSRT_OK = 0,
  MPSRT_ERR_VALUE = 1,  /* bad argument (std::invalid_argument) */
  MPSRT_ERR_OOM = 2,    /* out of memory (mpsrt::OutOfMemory) */
  MPSRT_ERR_RUNTIME = 3 /* any other failure */
} MpsrtStatus;

typedef struct MpsrtBuffer MpsrtBuffer;       /* opaque */
typedef struct MpsrtStream MpsrtStream;       /* opaque */
typedef struct MpsrtEvent MpsrtEvent;         /* opaque */
typedef struct MpsrtGenerator MpsrtGenerator; /* opaque */

/* mpsrt's element types (mpsrt/dtype_ids.h: the ids mpsrt::DType and the GLSL kernels also
 * take) and random ops (mpsrt::RandomOp), by name: the same values (csrc/c_api/c_api.cpp checks
 * each). */
enum MpsrtDType {
  MPSRT_DTYPE_UINT8 = MPSRT_DTYPE_ID_UINT8,
  MPSRT_DTYPE_INT32 = MPSRT_DTYPE_ID_INT32,
  MPSRT_DTYPE_INT64 = MPSRT_DTYPE_ID_INT64,
  MPSRT_DTYPE_UINT32 = MPSRT_DTYPE_ID_UINT32,
  MPSRT_DTYPE_FLOAT16 = MPSRT_DTYPE_ID_FLOAT16,
  MPSRT_DTYPE_BFLOAT16 = MPSRT_DTYPE_ID_BFLOAT16,
  MPSRT_DTYPE_FLOAT32 = MPSRT_DTYPE_ID_FLOAT32,
  MPSRT_DTYPE_FLOAT64 = MPSRT_DTYPE_ID_FLOAT64,
  MPSRT_DTYPE_BOOL = MPSRT_DTYPE_ID_BOOL,
  MPSRT_DTYPE_INT8 = MPSRT_DTYPE_ID_INT8,
  MPSRT_DTYPE_INT16 = MPSRT_DTYPE_ID_INT16,
  MPSRT_DTYPE_UINT16 = MPSRT_DTYPE_ID_UINT16,
  MPSRT_DTYPE_UINT64 = MPSRT_DTYPE_ID_UINT64
};
enum MpsrtRandomOp {
  MPSRT_RANDOM_BITS = 0,
  MPSRT_RANDOM_UNIFORM = 1,
  MPSRT_RANDOM_NORMAL = 2,
  MPSRT_RANDOM_INT_RANGE = 3,
  MPSRT_RANDOM_BERNOULLI = 4
};

/* What a random fill writes: the fields of mpsrt::RandomSpec (mpsrt/generator.h), `op` an
 * MpsrtRandomOp and `dtype` an MpsrtDType (ints: any other value is refused). */
typedef struct MpsrtRandomSpec {
  int op;
  int dtype;
  double a;       /* uniform: low; normal: mean */
  double b;       /* uniform: high; normal: std */
  int64_t low;    /* integer range: [low, low + range) */
  uint64_t range; /* integer range (>= 1) */
  double p;       /* bernoulli: probability of 1 */
} MpsrtRandomSpec;

/* A tensor kernel launch (mpsrt::KernelLaunch, mpsrt/kernel.h): argument i is the bytes
 * [offset, offset + nbytes) of a buffer; `written` 1 where the kernel may write them. */
typedef struct MpsrtKernelArg {
  const MpsrtBuffer* buffer;
  size_t offset;
  size_t nbytes;
  int written;
} MpsrtKernelArg;
typedef struct MpsrtKernelLaunch {
  int kernel; /* kernel_index(name) */
  uint32_t nspec;
  uint32_t spec[16];
  uint32_t nargs;
  MpsrtKernelArg args[8];
  uint32_t push_bytes;
  uint64_t push[12]; /* 96 bytes */
  uint32_t groups[3];
} MpsrtKernelLaunch;

/* MPSRT_TORCH_KERNELS: where the PyTorch device's operators run. */
enum MpsrtTorchKernels {
  MPSRT_TORCH_KERNELS_AUTO = 0, /* the device's kernels on a GPU, CPU kernels on CPU-type devices */
  MPSRT_TORCH_KERNELS_DEVICE = 1, /* the device's kernels wherever it has them */
  MPSRT_TORCH_KERNELS_CPU = 2     /* CPU kernels on every device */
};

typedef struct MpsrtCApi {
  uint32_t version;
  uint32_t size;
  /* The calling thread's last error message ("" when none). */
  const char* (*last_error)(void);

  /* devices */
  const char* (*backend_name)(void);
  int (*device_count)(void);
  int (*current_device)(void);
  MpsrtStatus (*set_device)(int device, int* previous);
  /* 1 when device memory has a host address (the unified memory model), else 0 (discrete). */
  int (*host_visible)(int device);
  MpsrtStatus (*synchronize)(int device);

  /* memory: the caching allocator. alloc on the device's current stream; *host_ptr is NULL
   * where the memory is not host-visible. */
  MpsrtStatus (*buffer_alloc)(size_t nbytes, int device, MpsrtBuffer** out, void** host_ptr);
  void (*buffer_free)(MpsrtBuffer* buffer);
  MpsrtStatus (*buffer_record_stream)(MpsrtBuffer* buffer, MpsrtStream* stream);
  /* fill nbytes at offset with a repeated pattern of 1, 2, 4 or 8 bytes, on the stream */
  MpsrtStatus (*buffer_fill)(MpsrtBuffer* buffer, size_t offset, size_t nbytes, uint64_t pattern,
                             unsigned pattern_size, MpsrtStream* stream);
  /* device-to-device copy of nbytes, on the stream */
  MpsrtStatus (*buffer_copy)(MpsrtBuffer* dst, size_t dst_offset, const MpsrtBuffer* src,
                             size_t src_offset, size_t nbytes, MpsrtStream* stream);
  /* calls visit(ctx, key, value) for each of mpsrt.memory_stats()'s entries (torch.cuda's keys) */
  MpsrtStatus (*memory_stats)(int device, void (*visit)(void* ctx, const char* key, int64_t value),
                              void* ctx);
  MpsrtStatus (*reset_peak_memory_stats)(int device);
  MpsrtStatus (*reset_accumulated_memory_stats)(int device);
  MpsrtStatus (*empty_cache)(int device);

  /* streams */
  MpsrtStream* (*stream_default)(int device);
  MpsrtStream* (*stream_current)(int device);
  MpsrtStatus (*stream_from_pool)(int priority, int device, MpsrtStream** out);
  /* makes `stream` current on its device; returns the previous current stream there */
  MpsrtStream* (*stream_set_current)(MpsrtStream* stream);
  int (*stream_device)(MpsrtStream* stream);   /* -1 for NULL */
  int (*stream_priority)(MpsrtStream* stream); /* 0 for NULL */
  MpsrtStatus (*stream_synchronize)(MpsrtStream* stream);
  /* 1: all work done; 0: not yet; -1: failed (last_error) */
  int (*stream_query)(MpsrtStream* stream);

  /* events */
  MpsrtStatus (*event_create)(int enable_timing, MpsrtEvent** out);
  void (*event_destroy)(MpsrtEvent* event);
  MpsrtStatus (*event_record)(MpsrtEvent* event, MpsrtStream* stream);
  MpsrtStatus (*event_wait)(MpsrtEvent* event, MpsrtStream* stream);
  int (*event_query)(MpsrtEvent* event); /* as stream_query */
  MpsrtStatus (*event_synchronize)(MpsrtEvent* event);
  MpsrtStatus (*event_elapsed_ms)(MpsrtEvent* start, MpsrtEvent* end, double* ms);

  /* ---- version 2 ---- */
  /* generators (mpsrt's Philox generators). Every generator_* call takes (generator, device):
   * a NULL generator names the device's default generator (device -1: the current device),
   * looked up at each call; a non-NULL one ignores `device`. A handle from generator_create
   * or generator_clone_state is owned by the caller (generator_destroy). */
  MpsrtStatus (*generator_create)(int device, MpsrtGenerator** out);
  void (*generator_destroy)(MpsrtGenerator* generator);
  int (*generator_device)(MpsrtGenerator* generator, int device);
  MpsrtStatus (*generator_clone_state)(MpsrtGenerator* generator, int device, MpsrtGenerator** out);
  MpsrtStatus (*generator_manual_seed)(MpsrtGenerator* generator, int device, uint64_t seed);
  /* seeds nondeterministically; *seed: the new seed */
  MpsrtStatus (*generator_seed)(MpsrtGenerator* generator, int device, uint64_t* seed);
  MpsrtStatus (*generator_initial_seed)(MpsrtGenerator* generator, int device, uint64_t* seed);
  MpsrtStatus (*generator_offset)(MpsrtGenerator* generator, int device, uint64_t* offset);
  MpsrtStatus (*generator_set_offset)(MpsrtGenerator* generator, int device, uint64_t offset);
  /* the 44-byte state of torch.mps (size must be 44) */
  MpsrtStatus (*generator_get_state)(MpsrtGenerator* generator, int device, uint8_t* out,
                                     size_t size);
  MpsrtStatus (*generator_set_state)(MpsrtGenerator* generator, int device, const uint8_t* data,
                                     size_t size);
  /* 64 random bits from the generator's stream (mpsrt::Generator::random_u64) */
  MpsrtStatus (*generator_random_u64)(MpsrtGenerator* generator, int device, uint64_t* out);
  /* fills `count` elements at byte `offset` of the buffer on the stream (mpsrt::random_fill);
   * a NULL generator: the buffer's device's default generator */
  MpsrtStatus (*random_fill)(MpsrtBuffer* buffer, size_t offset, uint64_t count,
                             const MpsrtRandomSpec* spec, MpsrtGenerator* generator,
                             MpsrtStream* stream);
  /* 1 when op can write dtype (mpsrt::random_supported), else 0 */
  int (*random_supported)(int op, int dtype);
  /* the integers an integer-range fill can write into dtype: [*min, *max) (random_int_bounds) */
  MpsrtStatus (*random_int_bounds)(int dtype, int64_t* min, uint64_t* max);

  /* profiler: an operation the host runs in a stream's order (mpsrt::profiler::host_op_*).
   * host_op_begin returns 0 when no session runs; host_op_end then records nothing. */
  int64_t (*host_op_begin)(void);
  void (*host_op_end)(const char* name, MpsrtStream* stream, int64_t begin);

  /* MPSRT_ERR_RUNTIME (with mpsrt's message) when the buffer belongs to the runtime of a parent
   * process (this process was forked after it was made), else MPSRT_OK (Buffer::check_owner) */
  MpsrtStatus (*buffer_check_owner)(const MpsrtBuffer* buffer);
  /* (free, total) bytes of the device, as mpsrt::mem_get_info */
  MpsrtStatus (*mem_get_info)(int device, uint64_t* free_bytes, uint64_t* total_bytes);

  /* ---- version 3: the memory models ---- */
  /* The device address of the buffer's first byte (mpsrt::Buffer::address): the host address on
   * unified memory, the device's own on discrete memory; unique among the device's live
   * buffers. 0 for NULL. */
  uint64_t (*buffer_address)(const MpsrtBuffer* buffer);
  /* The buffer's host address on unified memory; NULL on discrete memory (and for NULL). */
  void* (*buffer_host_ptr)(const MpsrtBuffer* buffer);
  /* Host -> device: nbytes from host memory at src into the buffer at byte `offset`, after the
   * device's pending work, complete when it returns (mpsrt::Buffer::copy_from_host: one memmove
   * on unified memory, staged through the device's staging pool on discrete memory). */
  MpsrtStatus (*buffer_copy_from_host)(MpsrtBuffer* dst, size_t offset, const void* src,
                                       size_t nbytes);
  /* Device -> host: nbytes of the buffer from byte `offset` into host memory at dst, after the
   * device's pending work, complete when it returns (mpsrt::Buffer::copy_to_host). */
  MpsrtStatus (*buffer_copy_to_host)(const MpsrtBuffer* src, size_t offset, void* dst,
                                     size_t nbytes);

  /* ---- version 4: tensor kernels ---- */
  /* The device's facts for kernels: *cpu_type 1 where the device is the host's processor
   * (DeviceProperties::cpu_type); *arg_bytes the largest span of a kernel argument, 0 where the
   * device runs no tensor kernels; *setting MPSRT_TORCH_KERNELS (an MpsrtTorchKernels). */
  MpsrtStatus (*device_kernel_info)(int device, int* cpu_type, uint64_t* arg_bytes, int* setting);
  /* The index of the kernel `name` (mpsrt::kernel_index), -1 when there is none. */
  int (*kernel_index)(const char* name);
  /* Encodes the launch on the stream (mpsrt::launch_kernel). */
  MpsrtStatus (*kernel_launch)(const MpsrtKernelLaunch* launch, MpsrtStream* stream);

  /* ---- version 5 ---- */
  /* A number that changes whenever the process's runtime is re-created (a fork's child, the
   * runtime reset that tests use): what a caller caches of the devices (device_kernel_info's
   * facts, an option's value) holds while it stays the same (mpsrt::runtime_generation). */
  uint64_t (*runtime_generation)(void);
} MpsrtCApi;

/* The table over the runtime of the linked library: the same pointer on every call, valid for
 * the life of the process. Making it starts nothing; the runtime starts at the first entry that
 * needs it (device_count, buffer_alloc, ...). */
MPSRT_API const MpsrtCApi* mpsrt_c_api(void);

#ifdef __cplusplus
}
#endif

#endif /* MPSRT_C_API_H */
