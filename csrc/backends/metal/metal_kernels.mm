// Kernels of the metal backend: the runtime kernels of csrc/kernels/runtime/ (fill, copy,
// random), which the build translates GLSL -> SPIR-V (glslc) -> MSL (SPIRV-Cross) and embeds as
// text; each is compiled at device open into its own MTLLibrary with fast math off (entry
// points mpsrt_fill, mpsrt_copy, mpsrt_random; the GLSL's specialisation constants are function
// constants of the same ids). Blits copy and fill 4-byte aligned ranges.
//
// Binding (SPIRV-Cross's order, checked by the build): the push constants are
// [[buffer(0)]] (setBytes), storage-buffer binding i is [[buffer(i + 1)]]. As on vulkan, a
// kernel addresses a window with 32-bit offsets: the buffer is bound at a 16-byte aligned offset
// and a range longer than kWindow is done window by window.
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

const char kFillSource[] =
#include "fill.msl.inc"
    ;
const char kCopySource[] =
#include "copy.msl.inc"
    ;
const char kRandomSource[] =
#include "random.msl.inc"
    ;

constexpr NSUInteger kGroup = 256;               // threads per threadgroup: function constant
                                                 // local_size_x (0 for fill / copy, 5 for random)
constexpr uint32_t kUnroll = 2;                  // items per thread and step (constant UNROLL)
constexpr uint64_t kMaxGroups = 8192;            // threadgroups per dispatch; kernels loop beyond
constexpr uint64_t kWindow = uint64_t(1) << 30;  // bytes a dispatch addresses from its base
constexpr uint64_t kMaxBlocks = 1u << 26;        // Philox blocks per random dispatch

[[noreturn]] void report(const char* what, NSError* error) {
  fail(what, error, "report this with the device name and macOS version");
}

id<MTLLibrary> compile(DeviceShared& d, const char* text, const char* name) {
  NSString* source = [NSString stringWithUTF8String:text];
  if (source == nil) detail::throw_error("[metal] an embedded kernel source is not UTF-8");
  MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
  // Exact float arithmetic: the kernels' `precise` operations must each round once.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  options.fastMathEnabled = NO;  // mathMode = MTLMathModeSafe from macOS 15 says the same
#pragma clang diagnostic pop
  NSError* error = nil;
  id<MTLLibrary> lib = [d.device newLibraryWithSource:source options:options error:&error];
  if (lib == nil)
    report((std::string("compiling ") + name + " (newLibraryWithSource) failed").c_str(), error);
  return lib;
}

// The pipeline of entry point `name` with function constants 0 .. n - 1 set to values.
id<MTLComputePipelineState> specialise(DeviceShared& d, id<MTLLibrary> lib, NSString* name,
                                       const uint32_t* values, NSUInteger n) {
  MTLFunctionConstantValues* constants = [[MTLFunctionConstantValues alloc] init];
  for (NSUInteger i = 0; i < n; ++i) {
    [constants setConstantValue:&values[i] type:MTLDataTypeUInt atIndex:i];
  }
  NSError* error = nil;
  id<MTLFunction> fn = [lib newFunctionWithName:name constantValues:constants error:&error];
  if (fn == nil)
    report((std::string("specialising ") + name.UTF8String + " failed").c_str(), error);
  id<MTLComputePipelineState> p = [d.device newComputePipelineStateWithFunction:fn error:&error];
  if (p == nil) {
    report((std::string("newComputePipelineStateWithFunction (") + name.UTF8String + ") failed")
               .c_str(),
           error);
  }
  return p;
}

// Dispatches enough threadgroups for `items` (kUnroll per thread; at most kMaxGroups: the
// kernels loop grid-stride).
void dispatch(id<MTLComputeCommandEncoder> enc, uint64_t items) {
  const uint64_t per_group = kGroup * kUnroll;
  const uint64_t groups =
      std::min<uint64_t>(std::max<uint64_t>((items + per_group - 1) / per_group, 1), kMaxGroups);
  [enc dispatchThreadgroups:MTLSizeMake(static_cast<NSUInteger>(groups), 1, 1)
      threadsPerThreadgroup:MTLSizeMake(kGroup, 1, 1)];
}

// Words a fill or copy of window bytes [first, first + n) writes (an upper bound of its items).
uint64_t words(uint64_t first, uint64_t n) {
  return (first + n + 3) / 4 - first / 4;
}

}  // namespace

void DeviceShared::create_kernels() {
  @autoreleasepool {
    id<MTLLibrary> fill = compile(*this, kFillSource, "fill");
    id<MTLLibrary> copy = compile(*this, kCopySource, "copy");
    random_library = compile(*this, kRandomSource, "random");
    // fill.comp / copy.comp constants: 0 local_size_x, 1 UNROLL, 2 VEC.
    const uint32_t fill_spec[3] = {kGroup, kUnroll, 16};
    fill_pipeline = specialise(*this, fill, @"mpsrt_fill", fill_spec, 3);
    const uint32_t copy16[3] = {kGroup, kUnroll, 16}, copy4[3] = {kGroup, kUnroll, 4},
                   copy1[3] = {kGroup, kUnroll, 1};
    copy16_pipeline = specialise(*this, copy, @"mpsrt_copy", copy16, 3);
    copy4_pipeline = specialise(*this, copy, @"mpsrt_copy", copy4, 3);
    copy1_pipeline = specialise(*this, copy, @"mpsrt_copy", copy1, 3);
  }
}

id<MTLComputePipelineState> DeviceShared::random_pipeline(const backend::RandomParams& p) {
  const backend::RandomVariant variant = backend::random_variant(p);
  std::lock_guard<std::mutex> lock(pipelines_mu);
  auto it = random_pipelines.find(variant.key);
  if (it != random_pipelines.end()) return it->second;
  @autoreleasepool {
    // random.comp's constants: 0-4 the variant's, 5 local_size_x, 6 UNROLL, 7 VEC.
    uint32_t values[8];
    std::memcpy(values, variant.values, sizeof(variant.values));
    values[5] = kGroup;
    values[6] = kUnroll;
    values[7] = 16;
    id<MTLComputePipelineState> pipe =
        specialise(*this, random_library, @"mpsrt_random", values, 8);
    random_pipelines.emplace(variant.key, pipe);
    return pipe;
  }
}

// Cost: a blit when the range is 4-byte aligned and the pattern one repeated byte, else one
// compute dispatch per window.
void Encoder::fill(id<MTLBuffer> buf, uint64_t offset, uint64_t n, uint64_t pattern8) const {
  if (n == 0) return;
  const uint8_t b0 = static_cast<uint8_t>(pattern8);
  if (pattern8 == b0 * 0x0101010101010101ULL && offset % 4 == 0 && n % 4 == 0) {
    id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
    [blit fillBuffer:buf range:NSMakeRange(offset, n) value:b0];
    [blit endEncoding];
    return;
  }
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  [enc setComputePipelineState:d.fill_pipeline];
  for (uint64_t at = 0; at < n;) {
    const uint64_t origin = offset + at, base = origin & ~uint64_t(15);
    const uint64_t len = std::min(n - at, kWindow - (origin - base));
    // Window byte j takes pattern byte (base + j - offset) % 8: rotate the pattern by that.
    const unsigned rot = static_cast<unsigned>((base - offset) & 7);
    const uint64_t p = rot == 0 ? pattern8 : (pattern8 >> (8 * rot)) | (pattern8 << (64 - 8 * rot));
    FillPush pc{static_cast<uint32_t>(origin - base),
                static_cast<uint32_t>(origin - base + len),
                {static_cast<uint32_t>(p), static_cast<uint32_t>(p >> 32)}};
    [enc setBytes:&pc length:sizeof pc atIndex:0];
    [enc setBuffer:buf offset:base atIndex:1];
    dispatch(enc, words(pc.first, len));
    at += len;
  }
  [enc endEncoding];
}

// Bytes [so, so + n) of s to [to, to + n) of t, which do not overlap: a blit when 4-byte
// aligned (macOS asks blits for multiples of 4), else copy.comp window by window.
void Encoder::direct_copy(id<MTLBuffer> s, uint64_t so, id<MTLBuffer> t, uint64_t to,
                          uint64_t n) const {
  if (so % 4 == 0 && to % 4 == 0 && n % 4 == 0) {
    id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
    [blit copyFromBuffer:s sourceOffset:so toBuffer:t destinationOffset:to size:n];
    [blit endEncoding];
    return;
  }
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  [enc setComputePipelineState:so % 16 == to % 16 ? d.copy16_pipeline
                               : so % 4 == to % 4 ? d.copy4_pipeline
                                                  : d.copy1_pipeline];
  for (uint64_t at = 0; at < n;) {
    const uint64_t sbase = (so + at) & ~uint64_t(15), tbase = (to + at) & ~uint64_t(15);
    const uint64_t len = std::min(n - at, kWindow - 16);
    CopyPush pc{static_cast<uint32_t>(so + at - sbase), static_cast<uint32_t>(to + at - tbase),
                static_cast<uint32_t>(len)};
    [enc setBytes:&pc length:sizeof pc atIndex:0];
    [enc setBuffer:s offset:sbase atIndex:1];
    [enc setBuffer:t offset:tbase atIndex:2];
    dispatch(enc, words(pc.dst, len));
    at += len;
  }
  [enc endEncoding];
}

// Overlapping ranges of one buffer go through the scratch buffer in chunks, in the order
// memmove would use, so that no chunk reads bytes an earlier chunk already overwrote (the
// buffers' tracked hazards order the steps).
void Encoder::copy(id<MTLBuffer> src, uint64_t src_off, id<MTLBuffer> dst, uint64_t dst_off,
                   uint64_t n) const {
  if (n == 0 || (src == dst && src_off == dst_off)) return;
  const bool overlap = src == dst && src_off < dst_off + n && dst_off < src_off + n;
  if (!overlap) {
    direct_copy(src, src_off, dst, dst_off, n);
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
    direct_copy(src, src_off + at, scratch, 0, len);
    direct_copy(scratch, 0, dst, dst_off + at, len);
  }
}

// Elements are written window by window (float64 fills never come here: the queue writes them
// on the host, metal_queue.mm). A destination of 4- or 8-byte elements that is not 4-byte aligned
// is generated into the scratch buffer and copied from there. Cost: one compute encoder per window
// (1 GiB) or scratch chunk, one dispatch each.
void Encoder::random(id<MTLBuffer> buf, uint64_t offset, const backend::RandomParams& p) const {
  if (p.count == 0 || !random_supported(p.op, p.dtype)) return;
  if (p.dtype == backend::RandomDType::F64) {
    detail::throw_error(
        "[metal] a float64 random fill reached the GPU kernels, which have no float64; "
        "report this (the queue writes float64 fills on the host)");
  }
  const uint64_t es = dtype_size(p.dtype);
  const uint64_t epb = 4 / backend::random_words_per_element(p);
  const bool direct = es < 4 || offset % 4 == 0;  // word stores need 4-byte alignment
  if (!direct && scratch == nil) {
    detail::throw_error("[metal] an unaligned random fill needs the scratch buffer");
  }
  const uint64_t room = direct ? kWindow - 16 : scratch_bytes;
  const uint64_t chunk = std::min<uint64_t>(room / es / epb, kMaxBlocks) * epb;

  RandomPush pc{};
  backend::pack_random_args(p, pc, [](double v) {
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
  });
  id<MTLComputePipelineState> pipe = d.random_pipeline(p);  // may throw: before any encoder
  for (uint64_t c0 = 0; c0 < p.count; c0 += chunk) {
    const uint64_t c1 = std::min(p.count, c0 + chunk);
    const uint64_t origin = direct ? offset + c0 * es : 0, base = origin & ~uint64_t(15);
    const uint64_t blk = p.offset + c0 / epb;  // c0 is a multiple of epb
    pc.block0[0] = static_cast<uint32_t>(blk);
    pc.block0[1] = static_cast<uint32_t>(blk >> 32);
    pc.nblocks = static_cast<uint32_t>((c1 - c0 + epb - 1) / epb);
    pc.e_lo = 0;
    pc.e_hi = static_cast<uint32_t>(c1 - c0);
    pc.dst_off = static_cast<uint32_t>(origin - base);
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    [enc setComputePipelineState:pipe];
    [enc setBytes:&pc length:sizeof pc atIndex:0];
    [enc setBuffer:(direct ? buf : scratch) offset:base atIndex:1];
    dispatch(enc, pc.nblocks);
    [enc endEncoding];
    if (!direct) direct_copy(scratch, 0, buf, offset + c0 * es, (c1 - c0) * es);
  }
}

}  // namespace mpsrt::metal
