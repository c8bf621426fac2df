/* mpsrt from C11 through its C API (mpsrt/c_api.h), linked with the installed static library:
 * lists the devices, allocates a Buffer, fills it on a stream, copies it to the host and checks
 * the bytes, shows what a bad argument returns (a status and a message), and frees everything.
 * Exits non-zero on any failure. */
#include <mpsrt/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { kBytes = 1 << 20 };

static const MpsrtCApi* api;

/* Prints a failed call's status and message; returns 1 when it failed. */
static int failed(MpsrtStatus st, const char* what) {
  if (st == MPSRT_OK) return 0;
  fprintf(stderr, "error: %s: status %d: %s\n", what, (int)st, api->last_error());
  return 1;
}

static int list_devices(void) {
  const int n = api->device_count();
  printf("mpsrt C API version %u, backend %s, %d device(s)\n", api->version, api->backend_name(),
         n);
  if (n == 0) fprintf(stderr, "error: no device: %s\n", api->last_error());
  for (int i = 0; i < n; ++i) {
    uint64_t free_bytes = 0, total_bytes = 0;
    if (failed(api->mem_get_info(i, &free_bytes, &total_bytes), "mem_get_info")) return 1;
    printf("  device %d: %llu MiB, %llu MiB free, %s memory\n", i,
           (unsigned long long)(total_bytes >> 20), (unsigned long long)(free_bytes >> 20),
           api->host_visible(i) ? "unified" : "discrete");
  }
  return n == 0;
}

/* Fills the buffer with 0x5A and its second half with the 4-byte pattern 0xCAFEF00D on a pool
 * stream, waits for that stream, and checks every byte on the host. */
static int fill_and_check(MpsrtBuffer* buffer, uint8_t* host) {
  MpsrtStream* stream = NULL;
  if (failed(api->stream_from_pool(0, 0, &stream), "stream_from_pool")) return 1;
  if (failed(api->buffer_fill(buffer, 0, kBytes, 0x5A, 1, stream), "buffer_fill") ||
      failed(api->buffer_fill(buffer, kBytes / 2, kBytes / 2, 0xCAFEF00Du, 4, stream),
             "buffer_fill") ||
      failed(api->buffer_record_stream(buffer, stream), "buffer_record_stream") ||
      failed(api->stream_synchronize(stream), "stream_synchronize") ||
      failed(api->buffer_copy_to_host(buffer, 0, host, kBytes), "buffer_copy_to_host")) {
    return 1;
  }
  const uint8_t word[4] = {0x0D, 0xF0, 0xFE, 0xCA}; /* 0xCAFEF00D, little-endian */
  for (size_t i = 0; i < kBytes; ++i) {
    const uint8_t want = i < kBytes / 2 ? 0x5A : word[i % 4];
    if (host[i] != want) {
      fprintf(stderr, "error: byte %zu is 0x%02X, expected 0x%02X\n", i, host[i], want);
      return 1;
    }
  }
  printf("  filled %d bytes on a stream and read them back: all as expected\n", kBytes);
  return 0;
}

/* A fill past the end of the buffer: refused with MPSRT_ERR_VALUE and a message, nothing done. */
static int bad_argument(MpsrtBuffer* buffer) {
  const MpsrtStatus st = api->buffer_fill(buffer, kBytes - 8, 16, 0, 1, api->stream_current(0));
  printf("  a fill past the end -> status %d (MPSRT_ERR_VALUE is %d): %s\n", (int)st,
         (int)MPSRT_ERR_VALUE, api->last_error());
  return st != MPSRT_ERR_VALUE || strlen(api->last_error()) == 0;
}

int main(void) {
  api = mpsrt_c_api();
  if (api->version < MPSRT_C_API_VERSION) {
    fprintf(stderr, "error: C API version %u, this program needs %d\n", api->version,
            MPSRT_C_API_VERSION);
    return 1;
  }
  if (list_devices()) return 1;
  static uint8_t host[kBytes];
  MpsrtBuffer* buffer = NULL;
  if (failed(api->buffer_alloc(kBytes, 0, &buffer, NULL), "buffer_alloc")) return 1;
  const int rc = fill_and_check(buffer, host) || bad_argument(buffer);
  api->buffer_free(buffer);
  if (failed(api->synchronize(0), "synchronize") || failed(api->empty_cache(0), "empty_cache")) {
    return 1;
  }
  printf(rc == 0 ? "ok\n" : "failed\n");
  return rc;
}
