// Kernels of the vulkan backend: fill, copy and random fills as compute shaders
// (csrc/kernels/runtime/*.comp, compiled to SPIR-V by glslc at build time); copies that a
// kernel cannot do (offsets that disagree mod 4, staging memory, MPSRT_VULKAN_COPY=dma) as
// vkCmdCopyBuffer.
//
// Storage buffers are bound through push descriptors in windows of at most
// DeviceShared::window_bytes (maxStorageBufferRange is 128 MiB on lavapipe, and a window is at
// most 1 GiB), so any buffer size works and shaders address a window with 32-bit indices;
// a heap larger than the device's largest VkBuffer has several overlapping VkBuffers, and each
// window lies inside one of them (Allocation::locate). Every kernel loops grid-stride over its
// window, `unroll` items per invocation and step, with at most max_groups workgroups of
// `workgroup` invocations (both from the device's SM count and the settings: see
// vulkan_backend.cpp). The widest access is 16 bytes (uvec4) where the bytes are aligned.
//
// Random fills reproduce the cpu backend's scalar table (random_impl.h) operation by
// operation: Philox words, integer transforms and the float32 / float64 uniform arithmetic
// (each operation rounded once, no fused multiply-add: `precise` in the shader) are exact.
// random.comp has two builds: the float64-free one (the one the metal backend translates to
// MSL) writes every dtype but float64, its normals from float-float logf / sqrtf / sincosf
// rounded to float (the correctly rounded values but within about 2^-24 ulp of a tie); the
// MPSRT_RANDOM_F64 build writes float64, its normal evaluating log and sin / cos with
// double-precision series, a few double ulps from glibc's (API.md promises 2 float32 ulps).
#include <algorithm>
#include <cstring>

#include "backends/gpu_random.h"
#include "backends/vulkan/vk_common.h"

namespace mpsrt::vk {
namespace {

const uint32_t kFillSpv[] =
#include "fill.spv.inc"
    ;
const uint32_t kCopySpv[] =
#include "copy.spv.inc"
    ;
const uint32_t kRandomSpv[] =
#include "random.spv.inc"
    ;
const uint32_t kRandomF64Spv[] =
#include "random_f64.spv.inc"
    ;

VkShaderModule make_module(DeviceShared& d, const uint32_t* code, size_t bytes) {
  auto ci = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  ci.codeSize = bytes;
  ci.pCode = code;
  VkShaderModule m = VK_NULL_HANDLE;
  check(d.fn.vkCreateShaderModule(d.device, &ci, nullptr, &m), "vkCreateShaderModule");
  return m;
}

VkDescriptorSetLayout make_set_layout(DeviceShared& d, uint32_t buffers) {
  VkDescriptorSetLayoutBinding b[2] = {};
  for (uint32_t i = 0; i < buffers; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto ci =
      make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  ci.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  ci.bindingCount = buffers;
  ci.pBindings = b;
  VkDescriptorSetLayout l = VK_NULL_HANDLE;
  check(d.fn.vkCreateDescriptorSetLayout(d.device, &ci, nullptr, &l),
        "vkCreateDescriptorSetLayout");
  return l;
}

VkPipelineLayout make_layout(DeviceShared& d, VkDescriptorSetLayout set, uint32_t push_bytes) {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  auto ci = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  ci.setLayoutCount = 1;
  ci.pSetLayouts = &set;
  ci.pushConstantRangeCount = 1;
  ci.pPushConstantRanges = &range;
  VkPipelineLayout l = VK_NULL_HANDLE;
  check(d.fn.vkCreatePipelineLayout(d.device, &ci, nullptr, &l), "vkCreatePipelineLayout");
  return l;
}

// A pipeline whose specialisation constants 0 .. n-1 are values[0 .. n-1] (32-bit each).
VkPipeline make_pipeline(DeviceShared& d, VkShaderModule m, VkPipelineLayout layout,
                         const uint32_t* values, uint32_t n) {
  VkSpecializationMapEntry entries[8];
  for (uint32_t i = 0; i < n; ++i) entries[i] = {i, 4 * i, 4};
  VkSpecializationInfo spec{n, entries, 4 * n, values};
  auto ci = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = m;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = &spec;
  ci.layout = layout;
  VkPipeline p = VK_NULL_HANDLE;
  check(d.fn.vkCreateComputePipelines(d.device, VK_NULL_HANDLE, 1, &ci, nullptr, &p),
        "vkCreateComputePipelines");
  return p;
}

// A storage-buffer window: bytes [base, base + range) of an allocation, inside `buffer`, whose
// byte 0 is the allocation's byte `first`.
struct Window {
  VkBuffer buffer;
  VkDeviceSize first;
  VkDeviceSize base;
  VkDeviceSize range;
};

// The window that holds byte `at`: from `at` rounded down to the offset alignment, up to
// window_bytes long (a multiple of 16: allocations are whole pages).
Window window_at(const DeviceShared& d, const Allocation& a, VkDeviceSize at) {
  Window w{};
  w.base = at / d.window_align * d.window_align;
  w.range = std::min(d.window_bytes, a.size - w.base);
  w.buffer = a.locate(w.base, &w.first);
  return w;
}

VkDescriptorBufferInfo info_of(const Window& w) {
  return VkDescriptorBufferInfo{w.buffer, w.base - w.first, w.range};
}

void push_windows(const Recorder& r, VkPipelineLayout layout, const Window* w, uint32_t n) {
  VkDescriptorBufferInfo info[2];
  VkWriteDescriptorSet writes[2];
  for (uint32_t i = 0; i < n; ++i) {
    info[i] = info_of(w[i]);
    writes[i] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &info[i];
  }
  r.d.fn.vkCmdPushDescriptorSetKHR(r.cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, n, writes);
}

// Work items of fill.comp / copy.comp over the destination window bytes [first, end): the
// uvec4 stores of the aligned middle or, with 4-byte access, the words.
uint64_t wide_items(uint32_t first, uint32_t end, bool vec16) {
  const uint64_t w0 = first / 4, w1 = (uint64_t(end) + 3) / 4;
  const uint64_t q0 = (uint64_t(first) + 15) / 16, q1 = end / 16;
  if (!vec16 || q0 >= q1) return w1 - w0;
  return std::max(q1 - q0, (4 * q0 - w0) + (w1 - 4 * q1));
}

}  // namespace

void DeviceShared::create_kernels() {
  set_layout = make_set_layout(*this, 1);
  copy_set_layout = make_set_layout(*this, 2);
  fill_layout = make_layout(*this, set_layout, sizeof(FillPush));
  copy_layout = make_layout(*this, copy_set_layout, sizeof(CopyPush));
  random_layout = make_layout(*this, set_layout, sizeof(RandomPush));
  fill_module = make_module(*this, kFillSpv, sizeof(kFillSpv));
  copy_module = make_module(*this, kCopySpv, sizeof(kCopySpv));
  random_module = make_module(*this, kRandomSpv, sizeof(kRandomSpv));
  random_f64_module = make_module(*this, kRandomF64Spv, sizeof(kRandomF64Spv));
  const uint32_t fill_spec[3] = {workgroup, unroll, vector};
  fill_pipeline = make_pipeline(*this, fill_module, fill_layout, fill_spec, 3);
  const uint32_t copy16_spec[3] = {workgroup, unroll, 16};
  const uint32_t copy4_spec[3] = {workgroup, unroll, 4};
  copy16_pipeline = make_pipeline(*this, copy_module, copy_layout, copy16_spec, 3);
  copy4_pipeline = make_pipeline(*this, copy_module, copy_layout, copy4_spec, 3);
}

// llvmpipe (lavapipe) ends any shader loop after 65535 iterations: a dispatch has enough
// workgroups that no invocation's grid-stride loop runs longer (on a GPU this floor is far
// below max_groups: a 1 GiB window of 16-byte vectors needs 2 groups of 256 x 2).
constexpr uint64_t kMaxLoopSteps = 65535;

uint32_t DeviceShared::groups(uint64_t items) const noexcept {
  const uint64_t per_group = uint64_t(workgroup) * unroll;
  const uint64_t all = (items + per_group - 1) / per_group;
  const uint64_t floor = (items + per_group * kMaxLoopSteps - 1) / (per_group * kMaxLoopSteps);
  return static_cast<uint32_t>(std::max<uint64_t>({std::min<uint64_t>(all, max_groups), floor, 1}));
}

VkPipeline DeviceShared::random_pipeline(const backend::RandomParams& p) {
  const backend::RandomVariant variant = backend::random_variant(p);
  const uint32_t key = variant.key;
  std::lock_guard<std::mutex> lock(pipelines_mu);
  auto it = random_pipelines.find(key);
  if (it != random_pipelines.end()) return it->second;
  // random.comp's constants: 0-4 the variant's, 5 local_size_x, 6 UNROLL, 7 VEC.
  uint32_t values[8];
  std::memcpy(values, variant.values, sizeof(variant.values));
  values[5] = workgroup;
  values[6] = unroll;
  values[7] = vector;
  VkShaderModule module = p.dtype == backend::RandomDType::F64 ? random_f64_module : random_module;
  VkPipeline pipe = make_pipeline(*this, module, random_layout, values, 8);
  random_pipelines.emplace(key, pipe);
  return pipe;
}

void Recorder::barrier() const {
  auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  d.fn.vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

// Cost: one dispatch per window (window_bytes: 128 MiB on lavapipe, 1 GiB at most), each of
// at most max_groups workgroups; 16-byte stores for the aligned middle.
void Recorder::fill(const Allocation& a, VkDeviceSize offset, VkDeviceSize n,
                    uint64_t pattern8) const {
  d.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.fill_pipeline);
  const VkDeviceSize end = offset + n;
  VkDeviceSize at = offset;
  bool first = true;
  while (at < end) {
    const Window w = window_at(d, a, at);
    const VkDeviceSize stop = std::min(end, w.base + w.range);
    // Window byte j takes pattern byte (j + base - offset) % 8 (base is 8-aligned).
    const unsigned rot = static_cast<unsigned>((w.base - offset) & 7);  // mod 8 of a difference
    const uint64_t p = rot == 0 ? pattern8 : (pattern8 >> (8 * rot)) | (pattern8 << (64 - 8 * rot));
    FillPush pc{static_cast<uint32_t>(at - w.base),
                static_cast<uint32_t>(stop - w.base),
                {static_cast<uint32_t>(p), static_cast<uint32_t>(p >> 32)}};
    if (!first) barrier();  // windows of one fill may share a partial word
    first = false;
    push_windows(*this, d.fill_layout, &w, 1);
    d.fn.vkCmdPushConstants(cb, d.fill_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
    d.fn.vkCmdDispatch(cb, d.groups(wide_items(pc.first, pc.end, d.vector >= 16)), 1, 1);
    at = stop;
  }
}

// Overlapping ranges of one allocation go through the scratch buffer in chunks, in the order
// memmove would use, so that no chunk reads bytes an earlier chunk already overwrote. A chunk
// sits in the scratch buffer at the source's offset mod 16, so that both of its copies can be
// kernels where the offsets allow.
void Recorder::copy(const Allocation& src, VkDeviceSize src_off, const Allocation& dst,
                    VkDeviceSize dst_off, VkDeviceSize n, bool dma) const {
  const bool same = src.memory == dst.memory;
  if (n == 0 || (same && src_off == dst_off)) return;
  const bool overlap = same && src_off < dst_off + n && dst_off < src_off + n;
  if (!overlap) {
    copy_region(src, src_off, dst, dst_off, n, dma);
    return;
  }
  const VkDeviceSize chunk = scratch.size - 16;
  const bool backward = dst_off > src_off;
  const VkDeviceSize count = (n + chunk - 1) / chunk;
  for (VkDeviceSize i = 0; i < count; ++i) {
    const VkDeviceSize k = backward ? count - 1 - i : i;
    const VkDeviceSize at = k * chunk;
    const VkDeviceSize len = std::min(chunk, n - at);
    const VkDeviceSize lane = (src_off + at) % 16;
    if (i > 0) barrier();  // the scratch buffer is reused
    copy_region(src, src_off + at, scratch, lane, len, dma);
    barrier();
    copy_region(scratch, lane, dst, dst_off + at, len, dma);
  }
}

// Cost (kernel): one dispatch per window_bytes (1 GiB at most) with uvec4 loads and stores
// where the offsets agree mod 16, 32-bit words where they agree mod 4. Else vkCmdCopyBuffer
// (the transfer path: on NVIDIA a copy engine, about a quarter of the kernel's bandwidth), one
// region per VkBuffer crossed.
void Recorder::copy_region(const Allocation& src, VkDeviceSize src_off, const Allocation& dst,
                           VkDeviceSize dst_off, VkDeviceSize n, bool dma) const {
  const VkDeviceSize lanes = (src_off - dst_off) & 15;  // agreement mod 16 (wraps harmlessly)
  const bool kernel = !dma && d.copy_kernel && lanes % 4 == 0;
  if (!kernel) {
    if (src.more.empty() && dst.more.empty()) {
      VkBufferCopy region{src_off, dst_off, n};
      d.fn.vkCmdCopyBuffer(cb, src.buffer, dst.buffer, 1, &region);
      return;
    }
    for (VkDeviceSize at = 0; at < n; at += d.window_bytes) {
      VkDeviceSize sf = 0, df = 0;
      const VkBuffer sb = src.locate(src_off + at, &sf);
      const VkBuffer db = dst.locate(dst_off + at, &df);
      VkBufferCopy region{src_off + at - sf, dst_off + at - df, std::min(d.window_bytes, n - at)};
      d.fn.vkCmdCopyBuffer(cb, sb, db, 1, &region);
    }
    return;
  }
  const bool vec16 = lanes == 0 && d.vector >= 16;
  d.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE,
                         vec16 ? d.copy16_pipeline : d.copy4_pipeline);
  // Each step copies as much as both windows hold (at least window_bytes - window_align).
  for (VkDeviceSize at = 0; at < n;) {
    const Window w[2] = {window_at(d, src, src_off + at), window_at(d, dst, dst_off + at)};
    const VkDeviceSize len = std::min(
        {n - at, w[0].base + w[0].range - (src_off + at), w[1].base + w[1].range - (dst_off + at)});
    const CopyPush pc{static_cast<uint32_t>(src_off + at - w[0].base),
                      static_cast<uint32_t>(dst_off + at - w[1].base), static_cast<uint32_t>(len)};
    if (at > 0) barrier();  // steps of one copy may share a partial word
    push_windows(*this, d.copy_layout, w, 2);
    d.fn.vkCmdPushConstants(cb, d.copy_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
    d.fn.vkCmdDispatch(cb, d.groups(wide_items(pc.dst, pc.dst + pc.n, vec16)), 1, 1);
    at += len;
  }
}

// Elements are written window by window. A destination that is not aligned to the element
// size is generated into the scratch buffer and copied from there.
// Cost: one dispatch per window (1 GiB at most), wide stores for every block but a window's
// last where the destination is aligned to the block's store width.
void Recorder::random(const Allocation& a, VkDeviceSize offset,
                      const backend::RandomParams& p) const {
  if (p.count == 0 || !random_supported(p.op, p.dtype)) return;
  const uint64_t es = dtype_size(p.dtype);
  const uint64_t epb = 4 / backend::random_words_per_element(p);
  const bool direct = offset % es == 0;
  // Elements per dispatch through the scratch buffer: whole blocks.
  const uint64_t scratch_chunk =
      std::max<uint64_t>(std::min(d.window_bytes, scratch.size) / es / epb, 1) * epb;

  RandomPush pc{};
  backend::pack_random_args(p, pc, [](double v) { return v; });

  d.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.random_pipeline(p));
  for (uint64_t c0 = 0, c1 = 0; c0 < p.count; c0 = c1) {
    Window w{scratch.buffer, 0, 0, std::min(d.window_bytes, scratch.size)};
    pc.dst_off = 0;
    if (direct) {
      // As many whole blocks as the window from this chunk's first element holds (at least
      // window_bytes - window_align bytes), or every element left.
      const VkDeviceSize origin = offset + c0 * es;
      w = window_at(d, a, origin);
      pc.dst_off = static_cast<uint32_t>(origin - w.base);
      const uint64_t fit = (w.base + w.range - origin) / es;
      c1 = fit >= p.count - c0 ? p.count : c0 + fit / epb * epb;
    } else {
      c1 = std::min(p.count, c0 + scratch_chunk);
    }
    const uint64_t k0 = c0 / epb;  // c0 is a multiple of epb
    const uint64_t blk = p.offset + k0;
    pc.block0[0] = static_cast<uint32_t>(blk);
    pc.block0[1] = static_cast<uint32_t>(blk >> 32);
    pc.nblocks = static_cast<uint32_t>((c1 - c0 + epb - 1) / epb);
    pc.e_lo = 0;
    pc.e_hi = static_cast<uint32_t>(c1 - c0);
    if (c0 > 0) barrier();  // neighbouring chunks may share a partial word (or the scratch)
    push_windows(*this, d.random_layout, &w, 1);
    d.fn.vkCmdPushConstants(cb, d.random_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
    d.fn.vkCmdDispatch(cb, d.groups(pc.nblocks), 1, 1);
    if (!direct) {
      barrier();
      copy_region(scratch, 0, a, offset + c0 * es, (c1 - c0) * es, false);
    }
  }
}

}  // namespace mpsrt::vk
