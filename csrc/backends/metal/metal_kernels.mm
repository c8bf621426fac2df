// Kernels of the metal backend: kernels.metal (embedded as text at build time and compiled
// once per device with fast math off), blit copies for 4-byte aligned ranges, compute kernels
// for fills, unaligned copies and random fills.
//
// Buffers are bound whole (offset 0) and kernels take 64-bit byte offsets, so any buffer size
// and any alignment work without windows.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/gpu_random.h"
#include "backends/metal/metal_common.h"
#include "mpsrt/error.h"

namespace mpsrt::metal {
namespace {

const char kKernelSource[] =
#include "metal_kernels_source.inc"
    ;

constexpr NSUInteger kGroup = 256;         // threads per threadgroup
constexpr uint64_t kMaxGroups = 8192;      // threadgroups per dispatch; kernels loop beyond
constexpr uint64_t kMaxBlocks = 1u << 26;  // Philox blocks per random dispatch (32-bit counts)

uint64_t double_bits(double v) {
  uint64_t b = 0;
  static_assert(sizeof b == sizeof v, "binary64");
  std::memcpy(&b, &v, sizeof b);
  return b;
}

id<MTLComputePipelineState> make_pipeline(DeviceShared& d, id<MTLFunction> fn, NSString* name) {
  NSError* error = nil;
  id<MTLComputePipelineState> p = [d.device newComputePipelineStateWithFunction:fn error:&error];
  if (p == nil) {
    fail(std::string("newComputePipelineStateWithFunction (") + name.UTF8String + ") failed", error,
         "report this with the device name and macOS version");
  }
  return p;
}

// Dispatches enough threadgroups for `items` threads (at most kMaxGroups; kernels loop).
void dispatch(id<MTLComputeCommandEncoder> enc, uint64_t items) {
  const uint64_t groups =
      std::min<uint64_t>(std::max<uint64_t>((items + kGroup - 1) / kGroup, 1), kMaxGroups);
  [enc dispatchThreadgroups:MTLSizeMake(static_cast<NSUInteger>(groups), 1, 1)
      threadsPerThreadgroup:MTLSizeMake(kGroup, 1, 1)];
}

}  // namespace

void DeviceShared::create_kernels() {
  @autoreleasepool {
    NSString* source = [NSString stringWithUTF8String:kKernelSource];
    if (source == nil) detail::throw_error("[metal] the embedded kernel source is not UTF-8");
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    // Exact float arithmetic: no reassociation, no reciprocal tricks (kernels.metal).
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    options.fastMathEnabled = NO;  // mathMode = MTLMathModeSafe from macOS 15 says the same
#pragma clang diagnostic pop
    NSError* error = nil;
    library = [device newLibraryWithSource:source options:options error:&error];
    if (library == nil) {
      fail("compiling the kernels (newLibraryWithSource) failed", error,
           "report this with the device name and macOS version");
    }
    id<MTLFunction> fill = [library newFunctionWithName:@"fill_bytes"];
    id<MTLFunction> copy = [library newFunctionWithName:@"copy_bytes"];
    if (fill == nil || copy == nil) {
      detail::throw_error(
          "[metal] the kernel library lacks fill_bytes or copy_bytes; rebuild mpsrt");
    }
    fill_pipeline = make_pipeline(*this, fill, @"fill_bytes");
    copy_pipeline = make_pipeline(*this, copy, @"copy_bytes");
  }
}

id<MTLComputePipelineState> DeviceShared::random_pipeline(const backend::RandomParams& p) {
  const backend::RandomVariant variant = backend::random_variant(p);
  const uint32_t key = variant.key;
  std::lock_guard<std::mutex> lock(pipelines_mu);
  auto it = random_pipelines.find(key);
  if (it != random_pipelines.end()) return it->second;
  @autoreleasepool {
    MTLFunctionConstantValues* constants = [[MTLFunctionConstantValues alloc] init];
    for (NSUInteger i = 0; i < 5; ++i) {
      [constants setConstantValue:&variant.values[i] type:MTLDataTypeUInt atIndex:i];
    }
    NSError* error = nil;
    id<MTLFunction> fn = [library newFunctionWithName:@"random_fill"
                                       constantValues:constants
                                                error:&error];
    if (fn == nil) {
      fail("specialising random_fill failed", error,
           "report this with the device name and macOS version");
    }
    id<MTLComputePipelineState> pipe = make_pipeline(*this, fn, @"random_fill");
    random_pipelines.emplace(key, pipe);
    return pipe;
  }
}

// Cost: one compute encoder and one dispatch; a blit fill when the range is 4-byte aligned
// and the pattern one repeated byte.
void Encoder::fill(id<MTLBuffer> buf, uint64_t offset, uint64_t n, uint64_t pattern8) const {
  if (n == 0) return;
  const uint8_t b0 = static_cast<uint8_t>(pattern8);
  if (pattern8 == b0 * 0x0101010101010101ULL && offset % 4 == 0 && n % 4 == 0) {
    id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
    [blit fillBuffer:buf range:NSMakeRange(offset, n) value:b0];
    [blit endEncoding];
    return;
  }
  // A byte at offset x takes pattern byte (x - offset) % 8: rotate so that it is x % 8.
  const unsigned rot = static_cast<unsigned>(offset & 7);
  const uint64_t p = rot == 0 ? pattern8 : (pattern8 << (8 * rot)) | (pattern8 >> (64 - 8 * rot));
  FillArgs args{offset, offset + n, {static_cast<uint32_t>(p), static_cast<uint32_t>(p >> 32)}};
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  [enc setComputePipelineState:d.fill_pipeline];
  [enc setBuffer:buf offset:0 atIndex:0];
  [enc setBytes:&args length:sizeof args atIndex:1];
  dispatch(enc, (args.end + 3) / 4 - args.first / 4);
  [enc endEncoding];
}

// Overlapping ranges of one buffer go through the scratch buffer in chunks, in the order
// memmove would use, so that no chunk reads bytes an earlier chunk already overwrote (the
// buffers' tracked hazards order the steps).
void Encoder::copy(id<MTLBuffer> src, uint64_t src_off, id<MTLBuffer> dst, uint64_t dst_off,
                   uint64_t n) const {
  if (n == 0 || (src == dst && src_off == dst_off)) return;
  const bool overlap = src == dst && src_off < dst_off + n && dst_off < src_off + n;
  auto direct = [&](id<MTLBuffer> s, uint64_t so, id<MTLBuffer> t, uint64_t to, uint64_t len) {
    if (so % 4 == 0 && to % 4 == 0 && len % 4 == 0) {  // macOS asks blits for multiples of 4
      id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
      [blit copyFromBuffer:s sourceOffset:so toBuffer:t destinationOffset:to size:len];
      [blit endEncoding];
      return;
    }
    CopyArgs args{so, to, len};
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    [enc setComputePipelineState:d.copy_pipeline];
    [enc setBuffer:s offset:0 atIndex:0];
    [enc setBuffer:t offset:0 atIndex:1];
    [enc setBytes:&args length:sizeof args atIndex:2];
    dispatch(enc, (to + len + 3) / 4 - to / 4);
    [enc endEncoding];
  };
  if (!overlap) {
    direct(src, src_off, dst, dst_off, n);
    return;
  }
  if (scratch == nil) detail::throw_error("[metal] an overlapping copy needs the scratch buffer");
  const uint64_t chunk = scratch_bytes;
  const bool backward = dst_off > src_off;
  const uint64_t count = (n + chunk - 1) / chunk;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t k = backward ? count - 1 - i : i;
    const uint64_t at = k * chunk;
    const uint64_t len = std::min(chunk, n - at);
    direct(src, src_off + at, scratch, 0, len);
    direct(scratch, 0, dst, dst_off + at, len);
  }
}

// Cost: one compute encoder, one dispatch per 2^26 Philox blocks.
void Encoder::random(id<MTLBuffer> buf, uint64_t offset, const backend::RandomParams& p) const {
  if (p.count == 0 || !random_supported(p.op, p.dtype)) return;
  const uint64_t es = dtype_size(p.dtype);
  const uint64_t epb = 4 / backend::random_words_per_element(p);
  const uint64_t chunk = kMaxBlocks * epb;

  RandomArgs a{};
  backend::pack_random_args(p, a, double_bits);
  a.zero = 0;

  id<MTLComputePipelineState> pipe = d.random_pipeline(p);  // may throw: before the encoder
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  [enc setComputePipelineState:pipe];
  [enc setBuffer:buf offset:0 atIndex:0];
  for (uint64_t c0 = 0; c0 < p.count; c0 += chunk) {
    const uint64_t c1 = std::min(p.count, c0 + chunk);
    const uint64_t blk = p.offset + c0 / epb;  // c0 is a multiple of epb
    a.block0[0] = static_cast<uint32_t>(blk);
    a.block0[1] = static_cast<uint32_t>(blk >> 32);
    a.nblocks = static_cast<uint32_t>((c1 - c0 + epb - 1) / epb);
    a.count = static_cast<uint32_t>(c1 - c0);
    a.dst_off = offset + c0 * es;
    [enc setBytes:&a length:sizeof a atIndex:1];
    dispatch(enc, a.nblocks);
  }
  [enc endEncoding];
}

}  // namespace mpsrt::metal
