// The C API's buffers (include/mpsrt/c_api.h): a buffer handle owns one mpsrt::Buffer from the
// caching allocator; freeing it is stream-ordered, as for Buffers.
#include "c_api/internal.h"
#include "mpsrt/allocator.h"
#include "mpsrt/stream.h"

namespace mpsrt::c_api {
namespace {

MpsrtStatus buffer_alloc(size_t nbytes, int device, MpsrtBuffer** out, void** host) noexcept {
  return guarded([&] {
    need(out, "buffer_alloc", "out");
    auto* b = new Buffer(nbytes, mpsrt::current_stream(device));
    *out = reinterpret_cast<MpsrtBuffer*>(b);
    if (host) *host = b->host_ptr();
  });
}

void buffer_free(MpsrtBuffer* b) noexcept {
  delete buf(b);
}

MpsrtStatus buffer_record_stream(MpsrtBuffer* b, MpsrtStream* s) noexcept {
  return guarded(
      [&] { need(buf(b), "buffer_record_stream", "buffer")->record_stream(stream_of_handle(s)); });
}

MpsrtStatus buffer_fill(MpsrtBuffer* b, size_t offset, size_t nbytes, uint64_t pattern,
                        unsigned pattern_size, MpsrtStream* s) noexcept {
  return guarded([&] {
    Buffer v = need(buf(b), "buffer_fill", "buffer")->view(offset, nbytes);
    v.fill(pattern, pattern_size, stream_of_handle(s));
  });
}

MpsrtStatus buffer_copy(MpsrtBuffer* dst, size_t dst_offset, const MpsrtBuffer* src,
                        size_t src_offset, size_t nbytes, MpsrtStream* s) noexcept {
  return guarded([&] {
    Buffer d = need(buf(dst), "buffer_copy", "dst")->view(dst_offset, nbytes);
    Buffer v = need(buf(src), "buffer_copy", "src")->view(src_offset, nbytes);
    d.copy_from(v, stream_of_handle(s));
  });
}

MpsrtStatus buffer_check_owner(const MpsrtBuffer* b) noexcept {
  return guarded([&] { need(buf(b), "buffer_check_owner", "buffer")->check_owner(); });
}

uint64_t buffer_address(const MpsrtBuffer* b) noexcept {
  return b ? buf(b)->address() : 0;
}

void* buffer_host_ptr(const MpsrtBuffer* b) noexcept {
  return b ? buf(b)->host_ptr() : nullptr;
}

MpsrtStatus buffer_copy_from_host(MpsrtBuffer* dst, size_t offset, const void* src,
                                  size_t nbytes) noexcept {
  return guarded([&] {
    Buffer v = need(buf(dst), "buffer_copy_from_host", "buffer")->view(offset, nbytes);
    v.copy_from_host(src, nbytes);
  });
}

MpsrtStatus buffer_copy_to_host(const MpsrtBuffer* src, size_t offset, void* dst,
                                size_t nbytes) noexcept {
  return guarded([&] {
    Buffer v = need(buf(src), "buffer_copy_to_host", "buffer")->view(offset, nbytes);
    v.copy_to_host(dst, nbytes);
  });
}

}  // namespace

void fill_buffer(MpsrtCApi& t) {
  t.buffer_alloc = buffer_alloc;
  t.buffer_free = buffer_free;
  t.buffer_record_stream = buffer_record_stream;
  t.buffer_fill = buffer_fill;
  t.buffer_copy = buffer_copy;
  t.buffer_check_owner = buffer_check_owner;
  t.buffer_address = buffer_address;
  t.buffer_host_ptr = buffer_host_ptr;
  t.buffer_copy_from_host = buffer_copy_from_host;
  t.buffer_copy_to_host = buffer_copy_to_host;
}

}  // namespace mpsrt::c_api
