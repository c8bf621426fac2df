/** \file
 * mpsrt's C API: a versioned table of C function pointers over the process's ONE runtime. It is
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
 * Version 6 adds host_op_enter: what a host operation on device memory does first, in one call.
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

/** This header's version of the table: a program built with it checks that the table's
 * MpsrtCApi::version is at least this (or the version it was written for). */
#define MPSRT_C_API_VERSION 6
/** The name of the PyCapsule `mpsrt._C._c_api`, through which the extension module exports its
 * table to other shared libraries of the process. */
#define MPSRT_C_API_CAPSULE_NAME "mpsrt._C._c_api"

/** What a call that can fail returns; on failure, last_error() says why. */
typedef enum MpsrtStatus {
  MPSRT_OK = 0,         /**< success */
  MPSRT_ERR_VALUE = 1,  /**< bad argument (std::invalid_argument) */
  MPSRT_ERR_OOM = 2,    /**< out of memory (mpsrt::OutOfMemory) */
  MPSRT_ERR_RUNTIME = 3 /**< any other failure */
} MpsrtStatus;

/** A buffer handle (opaque): owns one mpsrt::Buffer (buffer_alloc, buffer_free). */
typedef struct MpsrtBuffer MpsrtBuffer;
/** A stream handle (opaque): the stream's mpsrt::Stream::handle(), valid while the runtime
 * lives; never freed. */
typedef struct MpsrtStream MpsrtStream;
/** An event handle (opaque): owns one mpsrt::Event (event_create, event_destroy). */
typedef struct MpsrtEvent MpsrtEvent;
/** A generator handle (opaque): owns one mpsrt::Generator (generator_create or
 * generator_clone_state, generator_destroy); NULL names a device's default generator. */
typedef struct MpsrtGenerator MpsrtGenerator;

/** mpsrt's element types by name (mpsrt/dtype_ids.h: the ids mpsrt::DType and the GLSL kernels
 * also take): the same values (csrc/c_api/c_api.cpp checks each). */
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
/** mpsrt's random ops by name: mpsrt::RandomOp's values (csrc/c_api/c_api.cpp checks each;
 * which op writes which dtype: random_supported). */
enum MpsrtRandomOp {
  MPSRT_RANDOM_BITS = 0,      /**< raw 32-bit words (uint32 only) */
  MPSRT_RANDOM_UNIFORM = 1,   /**< a + (b - a) u, u uniform in [0, 1) */
  MPSRT_RANDOM_NORMAL = 2,    /**< a + b z, z standard normal */
  MPSRT_RANDOM_INT_RANGE = 3, /**< integers in [low, low + range) */
  MPSRT_RANDOM_BERNOULLI = 4  /**< 1 with probability p, else 0 */
};

/** What a random fill writes: the fields of mpsrt::RandomSpec (mpsrt/generator.h), `op` an
 * MpsrtRandomOp and `dtype` an MpsrtDType (ints: any other value is refused). */
typedef struct MpsrtRandomSpec {
  int op;         /**< an MpsrtRandomOp */
  int dtype;      /**< an MpsrtDType */
  double a;       /**< uniform: low; normal: mean */
  double b;       /**< uniform: high; normal: std */
  int64_t low;    /**< integer range: [low, low + range) */
  uint64_t range; /**< integer range (>= 1) */
  double p;       /**< bernoulli: probability of 1 */
} MpsrtRandomSpec;

/** Argument i of a tensor kernel launch (mpsrt::KernelArg, mpsrt/kernel.h): the bytes
 * [offset, offset + nbytes) of a buffer; `written` 1 where the kernel may write them. */
typedef struct MpsrtKernelArg {
  const MpsrtBuffer* buffer; /**< the buffer (on the stream's device) */
  size_t offset;             /**< the first byte, relative to the buffer */
  size_t nbytes;             /**< bytes of the range (at least 1) */
  int written;               /**< 1 where the kernel may write the range, else 0 */
} MpsrtKernelArg;
/** A tensor kernel launch: mpsrt::KernelLaunch's fields and capacities (a launch that asks for
 * more is refused with MPSRT_ERR_VALUE). */
typedef struct MpsrtKernelLaunch {
  int kernel;             /**< kernel_index(name) */
  uint32_t nspec;         /**< specialisation constants used (at most 16) */
  uint32_t spec[16];      /**< the specialisation constants' values */
  uint32_t nargs;         /**< arguments used (at most 8) */
  MpsrtKernelArg args[8]; /**< the arguments, by binding index */
  uint32_t push_bytes;    /**< bytes of `push` used (at most 96) */
  uint64_t push[12];      /**< push-constant bytes [32, 32 + push_bytes) of the kernel (96 bytes) */
  uint32_t groups[3];     /**< workgroups in x, y, z (1 to 65535 each) */
} MpsrtKernelLaunch;

/** MPSRT_TORCH_KERNELS: where the PyTorch device's operators run. */
enum MpsrtTorchKernels {
  MPSRT_TORCH_KERNELS_AUTO = 0,   /**< device kernels on a GPU, CPU kernels on CPU-type devices */
  MPSRT_TORCH_KERNELS_DEVICE = 1, /**< the device's kernels wherever it has them */
  MPSRT_TORCH_KERNELS_CPU = 2     /**< CPU kernels on every device */
};

/** The table of the C API, which mpsrt_c_api() returns. Fields are only ever appended (see
 * Compatibility at the top of this header); each group of fields says the version that added
 * it. A `device` of -1 means the calling thread's current device. */
typedef struct MpsrtCApi {
  /** @name The table and errors */
  /**@{*/
  /** MPSRT_C_API_VERSION of the mpsrt that made the table. */
  uint32_t version;
  /** sizeof(MpsrtCApi) of the mpsrt that made the table. */
  uint32_t size;
  /** The calling thread's last error message: set by a call that fails, "" after a call that
   * can fail and succeeds; valid until the thread's next call into the table. */
  const char* (*last_error)(void);
  /**@}*/

  /** @name Devices */
  /**@{*/
  /** The active backend's name ("cpu", "vulkan" or "metal"; "unavailable" when none could
   * start), made once: valid for the life of the process. */
  const char* (*backend_name)(void);
  /** Number of devices (mpsrt::device_count); 0, with last_error(), when the runtime cannot
   * start. */
  int (*device_count)(void);
  /** The calling thread's current device (mpsrt::current_device); 0 on failure. */
  int (*current_device)(void);
  /** Sets the calling thread's current device; *previous (when not NULL) gets the one before
   * (mpsrt::set_device). MPSRT_ERR_VALUE for an index out of range. */
  MpsrtStatus (*set_device)(int device, int* previous);
  /** 1 when device memory has a host address (the unified memory model), else 0 (discrete, or
   * on failure). It finds out with a 1-byte buffer on the device's current stream. */
  int (*host_visible)(int device);
  /** Waits until all work on every stream of the device is done (mpsrt::synchronize). */
  MpsrtStatus (*synchronize)(int device);
  /**@}*/

  /** @name Memory: the caching allocator
   * A buffer handle owns one mpsrt::Buffer; freeing it is stream-ordered, as for Buffers. */
  /**@{*/
  /** Allocates nbytes on the device's current stream into *out; *host_ptr (when host_ptr is not
   * NULL) gets the memory's host address, NULL where the memory is not host-visible.
   * MPSRT_ERR_OOM when the allocator cannot satisfy it. */
  MpsrtStatus (*buffer_alloc)(size_t nbytes, int device, MpsrtBuffer** out, void** host_ptr);
  /** Frees the buffer (stream-ordered) and its handle; NULL is ignored. */
  void (*buffer_free)(MpsrtBuffer* buffer);
  /** Marks the buffer as used by the stream (mpsrt::Buffer::record_stream). */
  MpsrtStatus (*buffer_record_stream)(MpsrtBuffer* buffer, MpsrtStream* stream);
  /** Fills nbytes at byte `offset` with a repeated pattern of 1, 2, 4 or 8 bytes (the low
   * pattern_size bytes of `pattern`, little-endian), on the stream (mpsrt::Buffer::fill).
   * MPSRT_ERR_VALUE when the range is not inside the buffer. */
  MpsrtStatus (*buffer_fill)(MpsrtBuffer* buffer, size_t offset, size_t nbytes, uint64_t pattern,
                             unsigned pattern_size, MpsrtStream* stream);
  /** Device-to-device copy of nbytes from src at src_offset to dst at dst_offset, on the stream
   * (mpsrt::Buffer::copy_from). */
  MpsrtStatus (*buffer_copy)(MpsrtBuffer* dst, size_t dst_offset, const MpsrtBuffer* src,
                             size_t src_offset, size_t nbytes, MpsrtStream* stream);
  /** Calls visit(ctx, key, value) for each of mpsrt::memory_stats()'s entries (torch.cuda's
   * keys); `key` is valid during the call only. */
  MpsrtStatus (*memory_stats)(int device, void (*visit)(void* ctx, const char* key, int64_t value),
                              void* ctx);
  /** Sets the device's peak statistics to the current values (mpsrt::reset_peak_memory_stats). */
  MpsrtStatus (*reset_peak_memory_stats)(int device);
  /** Zeroes the accumulated statistics (mpsrt::reset_accumulated_memory_stats). */
  MpsrtStatus (*reset_accumulated_memory_stats)(int device);
  /** Releases the device's cached, unused memory to the driver (mpsrt::empty_cache). */
  MpsrtStatus (*empty_cache)(int device);
  /**@}*/

  /** @name Streams
   * A stream handle is the stream's mpsrt::Stream::handle(): valid while the runtime lives,
   * never freed. */
  /**@{*/
  /** The device's default stream (mpsrt::default_stream); NULL on failure. */
  MpsrtStream* (*stream_default)(int device);
  /** The calling thread's current stream on the device (mpsrt::current_stream); NULL on
   * failure. */
  MpsrtStream* (*stream_current)(int device);
  /** A stream from the device's pool into *out (mpsrt::stream_from_pool); priority < 0 high,
   * 0 normal, > 0 low. */
  MpsrtStatus (*stream_from_pool)(int priority, int device, MpsrtStream** out);
  /** Makes `stream` current on its device; returns the previous current stream there (NULL on
   * failure). */
  MpsrtStream* (*stream_set_current)(MpsrtStream* stream);
  /** The stream's device; -1 for NULL. */
  int (*stream_device)(MpsrtStream* stream);
  /** The stream's priority class (< 0 high, 0 normal, > 0 low); 0 for NULL. */
  int (*stream_priority)(MpsrtStream* stream);
  /** Waits until the stream's work so far has completed. */
  MpsrtStatus (*stream_synchronize)(MpsrtStream* stream);
  /** 1: all work done; 0: not yet; -1: failed (last_error) */
  int (*stream_query)(MpsrtStream* stream);
  /**@}*/

  /** @name Events
   * An event handle owns one mpsrt::Event. */
  /**@{*/
  /** A new event into *out; with enable_timing nonzero, its records take device timestamps
   * (event_elapsed_ms). */
  MpsrtStatus (*event_create)(int enable_timing, MpsrtEvent** out);
  /** Destroys the event and its handle; NULL is ignored. */
  void (*event_destroy)(MpsrtEvent* event);
  /** Records the event after the stream's work so far (mpsrt::Event::record). */
  MpsrtStatus (*event_record)(MpsrtEvent* event, MpsrtStream* stream);
  /** Makes the stream's later work wait, on the device, for the event's last record; nothing
   * when the event was never recorded (mpsrt::Event::wait). */
  MpsrtStatus (*event_wait)(MpsrtEvent* event, MpsrtStream* stream);
  /** As stream_query, for the event's last record (1 when never recorded). */
  int (*event_query)(MpsrtEvent* event);
  /** Waits on the host for the event's last record (mpsrt::Event::synchronize). */
  MpsrtStatus (*event_synchronize)(MpsrtEvent* event);
  /** *ms: milliseconds from `start` to `end`, from device timestamps, once both have completed
   * (mpsrt::Event::elapsed_time). MPSRT_ERR_VALUE unless both have timing enabled, are
   * recorded, and on one device. */
  MpsrtStatus (*event_elapsed_ms)(MpsrtEvent* start, MpsrtEvent* end, double* ms);
  /**@}*/

  /** @name Generators and random fills (version 2)
   * mpsrt's Philox generators. Every generator_* call takes (generator, device): a NULL
   * generator names the device's default generator (device -1: the current device), looked up
   * at each call; a non-NULL one ignores `device`. A handle from generator_create or
   * generator_clone_state is owned by the caller (generator_destroy). */
  /**@{*/
  /** A new generator on the device, seeded nondeterministically, into *out. */
  MpsrtStatus (*generator_create)(int device, MpsrtGenerator** out);
  /** Destroys a handle from generator_create or generator_clone_state; NULL is ignored. */
  void (*generator_destroy)(MpsrtGenerator* generator);
  /** The generator's device; -1 on failure. */
  int (*generator_device)(MpsrtGenerator* generator, int device);
  /** A new generator on the same device with a copy of the generator's (seed, offset), into
   * *out (mpsrt::Generator::clone_state). */
  MpsrtStatus (*generator_clone_state)(MpsrtGenerator* generator, int device, MpsrtGenerator** out);
  /** Sets the seed and resets the offset to 0. */
  MpsrtStatus (*generator_manual_seed)(MpsrtGenerator* generator, int device, uint64_t seed);
  /** Seeds nondeterministically; *seed: the new seed. */
  MpsrtStatus (*generator_seed)(MpsrtGenerator* generator, int device, uint64_t* seed);
  /** *seed: the seed in force (mpsrt::Generator::initial_seed). */
  MpsrtStatus (*generator_initial_seed)(MpsrtGenerator* generator, int device, uint64_t* seed);
  /** *offset: the Philox blocks used up (mpsrt::Generator::offset). */
  MpsrtStatus (*generator_offset)(MpsrtGenerator* generator, int device, uint64_t* offset);
  /** Sets the offset (mpsrt::Generator::set_offset). */
  MpsrtStatus (*generator_set_offset)(MpsrtGenerator* generator, int device, uint64_t offset);
  /** Writes the 44-byte state of torch.mps into `out` (size must be 44). */
  MpsrtStatus (*generator_get_state)(MpsrtGenerator* generator, int device, uint8_t* out,
                                     size_t size);
  /** Sets the state from the 44 bytes at `data` (size must be 44). */
  MpsrtStatus (*generator_set_state)(MpsrtGenerator* generator, int device, const uint8_t* data,
                                     size_t size);
  /** 64 random bits from the generator's stream (mpsrt::Generator::random_u64). */
  MpsrtStatus (*generator_random_u64)(MpsrtGenerator* generator, int device, uint64_t* out);
  /** Fills `count` elements at byte `offset` of the buffer on the stream (mpsrt::random_fill);
   * a NULL generator: the buffer's device's default generator. */
  MpsrtStatus (*random_fill)(MpsrtBuffer* buffer, size_t offset, uint64_t count,
                             const MpsrtRandomSpec* spec, MpsrtGenerator* generator,
                             MpsrtStream* stream);
  /** 1 when op can write dtype (mpsrt::random_supported), else 0. */
  int (*random_supported)(int op, int dtype);
  /** The integers an integer-range fill can write into dtype: [*min, *max)
   * (mpsrt::random_int_bounds). MPSRT_ERR_VALUE for a value outside MpsrtDType. */
  MpsrtStatus (*random_int_bounds)(int dtype, int64_t* min, uint64_t* max);
  /**@}*/

  /** @name Profiler (version 2)
   * An operation the host runs in a stream's order (mpsrt::profiler::host_op_begin and
   * host_op_end). */
  /**@{*/
  /** The operation's start time; 0 when no session runs (host_op_end then records nothing). */
  int64_t (*host_op_begin)(void);
  /** Records the operation `name` that began at `begin` on the stream's track. A failure sets
   * last_error() only. */
  void (*host_op_end)(const char* name, MpsrtStream* stream, int64_t begin);
  /**@}*/

  /** @name Buffers and memory (version 2) */
  /**@{*/
  /** MPSRT_ERR_RUNTIME (with mpsrt's message) when the buffer belongs to the runtime of a parent
   * process (this process was forked after it was made), else MPSRT_OK (Buffer::check_owner) */
  MpsrtStatus (*buffer_check_owner)(const MpsrtBuffer* buffer);
  /** (free, total) bytes of the device, as mpsrt::mem_get_info */
  MpsrtStatus (*mem_get_info)(int device, uint64_t* free_bytes, uint64_t* total_bytes);
  /**@}*/

  /** @name The memory models (version 3) */
  /**@{*/
  /** The device address of the buffer's first byte (mpsrt::Buffer::address): the host address on
   * unified memory, the device's own on discrete memory; unique among the device's live
   * buffers. 0 for NULL. */
  uint64_t (*buffer_address)(const MpsrtBuffer* buffer);
  /** The buffer's host address on unified memory; NULL on discrete memory (and for NULL). */
  void* (*buffer_host_ptr)(const MpsrtBuffer* buffer);
  /** Host -> device: nbytes from host memory at src into the buffer at byte `offset`, after the
   * device's pending work, complete when it returns (mpsrt::Buffer::copy_from_host: one memmove
   * on unified memory, staged through the device's staging pool on discrete memory). */
  MpsrtStatus (*buffer_copy_from_host)(MpsrtBuffer* dst, size_t offset, const void* src,
                                       size_t nbytes);
  /** Device -> host: nbytes of the buffer from byte `offset` into host memory at dst, after the
   * device's pending work, complete when it returns (mpsrt::Buffer::copy_to_host). */
  MpsrtStatus (*buffer_copy_to_host)(const MpsrtBuffer* src, size_t offset, void* dst,
                                     size_t nbytes);
  /**@}*/

  /** @name Tensor kernels (version 4) */
  /**@{*/
  /** The device's facts for kernels: *cpu_type 1 where the device is the host's processor
   * (DeviceProperties::cpu_type); *arg_bytes the largest span of a kernel argument, 0 where the
   * device runs no tensor kernels; *setting MPSRT_TORCH_KERNELS (an MpsrtTorchKernels). */
  MpsrtStatus (*device_kernel_info)(int device, int* cpu_type, uint64_t* arg_bytes, int* setting);
  /** The index of the kernel `name` (mpsrt::kernel_index), -1 when there is none. */
  int (*kernel_index)(const char* name);
  /** Encodes the launch on the stream (mpsrt::launch_kernel). */
  MpsrtStatus (*kernel_launch)(const MpsrtKernelLaunch* launch, MpsrtStream* stream);
  /**@}*/

  /** @name The runtime generation (version 5) */
  /**@{*/
  /** A number that changes whenever the process's runtime is re-created (a fork's child, the
   * runtime reset that tests use): what a caller caches of the devices (device_kernel_info's
   * facts, an option's value) holds while it stays the same (mpsrt::runtime_generation). */
  uint64_t (*runtime_generation)(void);
  /**@}*/

  /** @name Host operations (version 6) */
  /**@{*/
  /** What a host operation on the device's memory does before it runs, in one call: waits for
   * the work queued so far on the calling thread's current stream of the device (as
   * stream_synchronize(stream_current(device)); mpsrt::profiler::host_op_enter: a few loads while
   * every stream of the process is idle and no profiler session runs) and sets *begin to
   * host_op_begin()'s start time (0 when no profiler session runs; the operation then ends with
   * host_op_end where *begin is not 0). MPSRT_ERR_VALUE for a device out of range or a NULL begin;
   * a failure of the stream's queued work as stream_synchronize's. */
  MpsrtStatus (*host_op_enter)(int device, int64_t* begin);
  /**@}*/
} MpsrtCApi;

/** The table over the runtime of the linked library: the same pointer on every call, valid for
 * the life of the process. Making it starts nothing; the runtime starts at the first entry that
 * needs it (device_count, buffer_alloc, ...). */
MPSRT_API const MpsrtCApi* mpsrt_c_api(void);

#ifdef __cplusplus
}
#endif

#endif /* MPSRT_C_API_H */
