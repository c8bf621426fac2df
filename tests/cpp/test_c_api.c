/* The C API (mpsrt/c_api.h) from plain C11, linked with the static library and no Python: the
 * table, devices, buffers, fills and copies, streams, events, a random fill, the error status and
 * message of bad input, and the allocator back where it started. Run by ctest once per built
 * backend (MPSRT_BACKEND set by tests/cpp/CMakeLists.txt); exits 77 (skipped) where that backend
 * has no device on this machine. */
#include <mpsrt/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

/* A call that must succeed: on failure, the status and mpsrt's message. */
#define CHECK_OK(api, call)                                                                \
  do {                                                                                     \
    MpsrtStatus st_ = (call);                                                              \
    if (st_ != MPSRT_OK) {                                                                 \
      fprintf(stderr, "%s:%d: %s -> status %d: %s\n", __FILE__, __LINE__, #call, (int)st_, \
              (api)->last_error());                                                        \
      ++g_failures;                                                                        \
    }                                                                                      \
  } while (0)

enum { kBytes = 4096 };

/* ---- memory statistics through memory_stats' visitor */
typedef struct StatQuery {
  const char* key;
  int64_t value;
  int found;
} StatQuery;

static void visit_stat(void* ctx, const char* key, int64_t value) {
  StatQuery* q = (StatQuery*)ctx;
  if (strcmp(key, q->key) == 0) {
    q->value = value;
    q->found = 1;
  }
}

static int64_t stat(const MpsrtCApi* api, const char* key) {
  StatQuery q = {key, -1, 0};
  CHECK_OK(api, api->memory_stats(0, visit_stat, &q));
  CHECK(q.found);
  return q.value;
}

/* ---- the table */
static void test_table(const MpsrtCApi* api) {
  CHECK(api != NULL);
  CHECK(mpsrt_c_api() == api);
  CHECK(api->version == MPSRT_C_API_VERSION);
  CHECK(api->size == sizeof(MpsrtCApi));
  /* Every entry is set: the function pointers that follow version and size. */
  const size_t first = offsetof(MpsrtCApi, last_error);
  const size_t count = (sizeof(MpsrtCApi) - first) / sizeof(void*);
  CHECK(count == (offsetof(MpsrtCApi, host_op_enter) - first) / sizeof(void*) + 1);
  for (size_t i = 0; i < count; ++i) {
    uintptr_t entry = 0;
    memcpy(&entry, (const char*)api + first + i * sizeof(void*), sizeof entry);
    if (entry == 0) fprintf(stderr, "entry %zu of the table is NULL\n", i);
    CHECK(entry != 0);
  }
  /* Nothing re-creates the runtime here: its generation holds. */
  const uint64_t generation = api->runtime_generation();
  CHECK(api->device_count() > 0);
  CHECK(api->runtime_generation() == generation);
}

/* ---- devices */
static void test_devices(const MpsrtCApi* api, const char* wanted) {
  if (wanted != NULL) CHECK(strcmp(api->backend_name(), wanted) == 0);
  CHECK(api->device_count() >= 1);
  CHECK(api->current_device() == 0);
  int previous = -1;
  CHECK_OK(api, api->set_device(0, &previous));
  CHECK(previous == 0);
  CHECK(strcmp(api->last_error(), "") == 0);
  uint64_t free_bytes = 0, total_bytes = 0;
  CHECK_OK(api, api->mem_get_info(0, &free_bytes, &total_bytes));
  CHECK(total_bytes > 0 && free_bytes <= total_bytes);
  int cpu_type = -1, setting = -1;
  uint64_t arg_bytes = 0;
  CHECK_OK(api, api->device_kernel_info(0, &cpu_type, &arg_bytes, &setting));
  CHECK(cpu_type == 0 || cpu_type == 1);
  if (strcmp(api->backend_name(), "cpu") == 0) CHECK(cpu_type == 1);
  CHECK(setting >= MPSRT_TORCH_KERNELS_AUTO && setting <= MPSRT_TORCH_KERNELS_CPU);
  CHECK(api->host_visible(0) == 0 || api->host_visible(0) == 1);
}

/* ---- buffers, fills and copies on a stream, read back on the host */
static void test_buffers(const MpsrtCApi* api, MpsrtStream* stream) {
  const int64_t allocated0 = stat(api, "allocated_bytes.all.current");
  MpsrtBuffer *a = NULL, *b = NULL;
  void* host = (void*)1;
  CHECK_OK(api, api->buffer_alloc(kBytes, 0, &a, &host));
  CHECK_OK(api, api->buffer_alloc(kBytes, 0, &b, NULL));
  CHECK(a != NULL && b != NULL && a != b);
  CHECK(host == api->buffer_host_ptr(a));
  CHECK(api->host_visible(0) == (host != NULL));
  CHECK(api->buffer_address(a) != 0 && api->buffer_address(a) != api->buffer_address(b));
  CHECK(stat(api, "allocated_bytes.all.current") >= allocated0 + 2 * kBytes);

  /* a: 0xAB everywhere, then [1024, 2048) of the 4-byte pattern 0x11223344 */
  CHECK_OK(api, api->buffer_fill(a, 0, kBytes, 0xAB, 1, stream));
  CHECK_OK(api, api->buffer_fill(a, 1024, 1024, 0x11223344u, 4, stream));
  /* b: bytes i % 251 from the host; its [0, 1024) copied into a's [3072, 4096) on the stream */
  static uint8_t in[kBytes], out[kBytes];
  for (int i = 0; i < kBytes; ++i) in[i] = (uint8_t)(i % 251);
  CHECK_OK(api, api->buffer_copy_from_host(b, 0, in, kBytes));
  CHECK_OK(api, api->buffer_copy(a, 3072, b, 0, 1024, stream));
  CHECK_OK(api, api->stream_synchronize(stream));
  CHECK(api->stream_query(stream) == 1);

  memset(out, 0, sizeof out);
  CHECK_OK(api, api->buffer_copy_to_host(a, 0, out, kBytes));
  const uint8_t word[4] = {0x44, 0x33, 0x22, 0x11}; /* little-endian 0x11223344 */
  int bad = 0;
  for (int i = 0; i < kBytes; ++i) {
    const uint8_t want = i < 1024 || (i >= 2048 && i < 3072) ? 0xAB
                         : i < 2048                          ? word[i % 4]
                                                             : (uint8_t)((i - 3072) % 251);
    bad += out[i] != want;
  }
  CHECK(bad == 0);
  /* a partial read at an offset */
  uint8_t part[8] = {0};
  CHECK_OK(api, api->buffer_copy_to_host(b, 300, part, sizeof part));
  CHECK(part[0] == 300 % 251 && part[7] == 307 % 251);

  api->buffer_free(a);
  api->buffer_free(b);
  CHECK_OK(api, api->synchronize(0));
  CHECK(stat(api, "allocated_bytes.all.current") == allocated0);
}

/* ---- streams and events */
static void test_streams_and_events(const MpsrtCApi* api) {
  MpsrtStream* def = api->stream_default(0);
  CHECK(def != NULL && api->stream_current(0) == def);
  CHECK(api->stream_device(def) == 0);
  MpsrtStream* side = NULL;
  CHECK_OK(api, api->stream_from_pool(0, 0, &side));
  CHECK(side != NULL && side != def && api->stream_device(side) == 0);
  CHECK(api->stream_priority(side) == 0);
  CHECK(api->stream_set_current(side) == def);
  CHECK(api->stream_current(0) == side);
  CHECK(api->stream_set_current(def) == side);

  MpsrtBuffer* buf = NULL;
  CHECK_OK(api, api->buffer_alloc(kBytes, 0, &buf, NULL));
  MpsrtEvent *start = NULL, *end = NULL;
  CHECK_OK(api, api->event_create(1, &start));
  CHECK_OK(api, api->event_create(1, &end));
  CHECK_OK(api, api->event_record(start, def));
  CHECK_OK(api, api->buffer_fill(buf, 0, kBytes, 0x5A, 1, def));
  CHECK_OK(api, api->event_record(end, def));
  /* the side stream waits for the fill, then overwrites the first half */
  CHECK_OK(api, api->event_wait(end, side));
  CHECK_OK(api, api->buffer_fill(buf, 0, kBytes / 2, 0xC3, 1, side));
  CHECK_OK(api, api->buffer_record_stream(buf, side));
  CHECK_OK(api, api->stream_synchronize(side));
  CHECK(api->event_query(end) == 1);
  CHECK_OK(api, api->event_synchronize(end));
  double ms = -1.0;
  CHECK_OK(api, api->event_elapsed_ms(start, end, &ms));
  CHECK(ms >= 0.0);

  uint8_t first = 0, last = 0;
  CHECK_OK(api, api->buffer_copy_to_host(buf, 0, &first, 1));
  CHECK_OK(api, api->buffer_copy_to_host(buf, kBytes - 1, &last, 1));
  CHECK(first == 0xC3 && last == 0x5A);
  /* a host operation first waits for the current stream's queued work (no profiler session:
     its start time is 0) */
  CHECK_OK(api, api->buffer_fill(buf, 0, kBytes, 0x11, 1, def));
  int64_t begin = -1;
  CHECK_OK(api, api->host_op_enter(0, &begin));
  CHECK(begin == 0);
  CHECK(api->stream_query(def) == 1);
  CHECK_OK(api, api->host_op_enter(0, &begin)); /* idle: returns at once */
  CHECK_OK(api, api->buffer_copy_to_host(buf, kBytes - 1, &last, 1));
  CHECK(last == 0x11);

  api->event_destroy(start);
  api->event_destroy(end);
  api->buffer_free(buf);
}

/* ---- a random fill: uniform floats in [0, 1), the same for the same seed */
static void uniform(const MpsrtCApi* api, MpsrtBuffer* buf, float* out, size_t n) {
  MpsrtRandomSpec spec;
  memset(&spec, 0, sizeof spec);
  spec.op = MPSRT_RANDOM_UNIFORM;
  spec.dtype = MPSRT_DTYPE_FLOAT32;
  spec.a = 0.0;
  spec.b = 1.0;
  CHECK_OK(api, api->generator_manual_seed(NULL, 0, 42));
  CHECK_OK(api, api->random_fill(buf, 0, n, &spec, NULL, api->stream_current(0)));
  CHECK_OK(api, api->buffer_copy_to_host(buf, 0, out, n * sizeof(float)));
}

static void test_random(const MpsrtCApi* api) {
  enum { n = 256 };
  MpsrtBuffer* buf = NULL;
  CHECK_OK(api, api->buffer_alloc(n * sizeof(float), 0, &buf, NULL));
  float x[n], y[n];
  uniform(api, buf, x, n);
  uniform(api, buf, y, n);
  int in_range = 1;
  for (int i = 0; i < n; ++i) in_range &= x[i] >= 0.0f && x[i] < 1.0f;
  CHECK(in_range);
  CHECK(x[0] != x[1]);
  CHECK(memcmp(x, y, sizeof x) == 0);
  uint64_t seed = 0;
  CHECK_OK(api, api->generator_initial_seed(NULL, 0, &seed));
  CHECK(seed == 42);
  CHECK(api->random_supported(MPSRT_RANDOM_NORMAL, MPSRT_DTYPE_INT32) == 0);
  api->buffer_free(buf);
}

/* ---- bad input: a status, a message "[component] ...", nothing done */
static void expect_error(const MpsrtCApi* api, MpsrtStatus st, MpsrtStatus want, const char* part) {
  const char* msg = api->last_error();
  printf("  refused (status %d): %s\n", (int)st, msg);
  CHECK(st == want);
  CHECK(msg[0] == '[');
  if (strstr(msg, part) == NULL) fprintf(stderr, "message '%s' lacks '%s'\n", msg, part);
  CHECK(strstr(msg, part) != NULL);
}

static void test_errors(const MpsrtCApi* api) {
  MpsrtStream* s = api->stream_current(0);
  MpsrtBuffer* buf = NULL;
  CHECK_OK(api, api->buffer_alloc(64, 0, &buf, NULL));
  CHECK_OK(api, api->buffer_fill(buf, 0, 64, 0x77, 1, s));
  expect_error(api, api->buffer_fill(buf, 32, 64, 0, 1, s), MPSRT_ERR_VALUE, "outside the buffer");
  expect_error(api, api->buffer_fill(buf, 0, 64, 0, 3, s), MPSRT_ERR_VALUE, "pattern size");
  expect_error(api, api->buffer_fill(NULL, 0, 64, 0, 1, s), MPSRT_ERR_VALUE, "buffer is NULL");
  uint8_t out[64];
  expect_error(api, api->buffer_copy_to_host(buf, 1, out, 64), MPSRT_ERR_VALUE,
               "outside the buffer");
  expect_error(api, api->set_device(api->device_count(), NULL), MPSRT_ERR_VALUE,
               "invalid device index");
  expect_error(api, api->stream_synchronize(NULL), MPSRT_ERR_VALUE, "Stream is empty");
  int64_t begin = -1;
  expect_error(api, api->host_op_enter(0, NULL), MPSRT_ERR_VALUE, "begin is NULL");
  expect_error(api, api->host_op_enter(api->device_count(), &begin), MPSRT_ERR_VALUE,
               "invalid device index");
  CHECK(begin == -1);
  expect_error(api, api->event_record(NULL, s), MPSRT_ERR_VALUE, "event is NULL");
  uint8_t state[8];
  expect_error(api, api->generator_get_state(NULL, 0, state, sizeof state), MPSRT_ERR_VALUE,
               "44 bytes");
  /* the refused calls changed nothing; a call that succeeds clears the message */
  CHECK_OK(api, api->buffer_copy_to_host(buf, 0, out, 64));
  CHECK(out[0] == 0x77 && out[63] == 0x77);
  CHECK(strcmp(api->last_error(), "") == 0);
  CHECK(api->current_device() == 0);
  api->buffer_free(buf);
}

int main(void) {
  const MpsrtCApi* api = mpsrt_c_api();
  test_table(api);
  const char* wanted = getenv("MPSRT_BACKEND");
  if (api->device_count() == 0) {
    printf("skipped: no device (%s)\n", api->last_error());
    return wanted != NULL && strcmp(wanted, "cpu") != 0 ? 77 : 1;
  }
  printf("mpsrt C API %u on %s, %d device(s)\n", api->version, api->backend_name(),
         api->device_count());
  const int64_t allocated0 = stat(api, "allocated_bytes.all.current");
  const int64_t allocations0 = stat(api, "allocation.all.current");
  test_devices(api, wanted);
  test_buffers(api, api->stream_current(0));
  test_streams_and_events(api);
  test_random(api);
  test_errors(api);
  CHECK_OK(api, api->synchronize(0));
  CHECK(stat(api, "allocated_bytes.all.current") == allocated0);
  CHECK(stat(api, "allocation.all.current") == allocations0);
  if (g_failures != 0) fprintf(stderr, "%d check(s) failed\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
