// Kernels of the vulkan backend: fill and random fills as compute shaders (shaders/*.comp,
// compiled to SPIR-V by glslc at build time), copies as vkCmdCopyBuffer.
//
// Storage buffers are bound through push descriptors in windows of at most
// DeviceShared::window_bytes (maxStorageBufferRange is 128 MiB on lavapipe), so any buffer
// size works; shaders address 32-bit words inside the window and loop over their range
// (at most kMaxGroups workgroups per dispatch).
//
// Random fills reproduce the cpu backend's scalar table (random_impl.h) operation by
// operation: Philox words, integer transforms and the float32 / float64 uniform arithmetic
// (each operation rounded once, no fused multiply-add: `precise` in the shader) are exact.
// Normal uses Box-Muller with logf and sincosf evaluated in double precision and rounded to
// float, so a float32 normal is bit-identical wherever glibc's logf / sincosf return the
// correctly rounded value; float64 normal evaluates log and sin / cos with double-precision
// series, which agree with glibc's to a few double ulps (API.md promises 2 float32 ulps).
#include <algorithm>
#include <cstring>

#include "backends/gpu_random.h"
#include "backends/vulkan/vk_common.h"

namespace mpsrt::vk {
namespace {

const uint32_t kFillSpv[] =
#include "fill.spv.inc"
    ;
const uint32_t kRandomSpv[] =
#include "random.spv.inc"
    ;

constexpr uint32_t kFillGroup = 256;   // fill.comp's local_size_x
constexpr uint32_t kRandomGroup = 64;  // random.comp's local_size_x
constexpr uint32_t kMaxGroups = 4096;

VkShaderModule make_module(DeviceShared& d, const uint32_t* code, size_t bytes) {
  auto ci = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  ci.codeSize = bytes;
  ci.pCode = code;
  VkShaderModule m = VK_NULL_HANDLE;
  check(d.fn.vkCreateShaderModule(d.device, &ci, nullptr, &m), "vkCreateShaderModule");
  return m;
}

VkPipelineLayout make_layout(DeviceShared& d, uint32_t push_bytes) {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  auto ci = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  ci.setLayoutCount = 1;
  ci.pSetLayouts = &d.set_layout;
  ci.pushConstantRangeCount = 1;
  ci.pPushConstantRanges = &range;
  VkPipelineLayout l = VK_NULL_HANDLE;
  check(d.fn.vkCreatePipelineLayout(d.device, &ci, nullptr, &l), "vkCreatePipelineLayout");
  return l;
}

VkPipeline make_pipeline(DeviceShared& d, VkShaderModule m, VkPipelineLayout layout,
                         const VkSpecializationInfo* spec) {
  auto ci = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = m;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec;
  ci.layout = layout;
  VkPipeline p = VK_NULL_HANDLE;
  check(d.fn.vkCreateComputePipelines(d.device, VK_NULL_HANDLE, 1, &ci, nullptr, &p),
        "vkCreateComputePipelines");
  return p;
}

uint32_t groups_for(uint64_t items, uint32_t group) {
  return static_cast<uint32_t>(std::min<uint64_t>((items + group - 1) / group, kMaxGroups));
}

void push_window(const Recorder& r, VkPipelineLayout layout, VkBuffer buf, VkDeviceSize base,
                 VkDeviceSize range) {
  VkDescriptorBufferInfo info{buf, base, range};
  auto w = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
  w.dstBinding = 0;
  w.descriptorCount = 1;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  w.pBufferInfo = &info;
  r.d.fn.vkCmdPushDescriptorSetKHR(r.cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &w);
}

}  // namespace

void DeviceShared::create_kernels() {
  VkDescriptorSetLayoutBinding b{};
  b.binding = 0;
  b.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  b.descriptorCount = 1;
  b.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  auto ci =
      make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  ci.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  ci.bindingCount = 1;
  ci.pBindings = &b;
  check(fn.vkCreateDescriptorSetLayout(device, &ci, nullptr, &set_layout),
        "vkCreateDescriptorSetLayout");
  fill_layout = make_layout(*this, sizeof(FillPush));
  random_layout = make_layout(*this, sizeof(RandomPush));
  fill_module = make_module(*this, kFillSpv, sizeof(kFillSpv));
  random_module = make_module(*this, kRandomSpv, sizeof(kRandomSpv));
  fill_pipeline = make_pipeline(*this, fill_module, fill_layout, nullptr);
}

VkPipeline DeviceShared::random_pipeline(const backend::RandomParams& p) {
  const backend::RandomVariant variant = backend::random_variant(p);
  const uint32_t key = variant.key;
  std::lock_guard<std::mutex> lock(pipelines_mu);
  auto it = random_pipelines.find(key);
  if (it != random_pipelines.end()) return it->second;
  VkSpecializationMapEntry entries[5];
  for (uint32_t i = 0; i < 5; ++i) entries[i] = {i, 4 * i, 4};
  VkSpecializationInfo spec{5, entries, sizeof(variant.values), variant.values};
  VkPipeline pipe = make_pipeline(*this, random_module, random_layout, &spec);
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

// Cost: one dispatch per window (window_bytes, 128 MiB on lavapipe).
void Recorder::fill(VkBuffer buf, VkDeviceSize buf_size, VkDeviceSize offset, VkDeviceSize n,
                    uint64_t pattern8) const {
  d.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.fill_pipeline);
  const VkDeviceSize end = offset + n;
  VkDeviceSize at = offset;
  bool first = true;
  while (at < end) {
    const VkDeviceSize base = at / d.window_align * d.window_align;
    const VkDeviceSize range = std::min(d.window_bytes, buf_size - base);
    const VkDeviceSize stop = std::min(end, base + range);
    // Window byte j takes pattern byte (j + base - offset) % 8 (base is 8-aligned).
    const unsigned rot = static_cast<unsigned>((base - offset) & 7);  // mod 8 of a difference
    const uint64_t p = rot == 0 ? pattern8 : (pattern8 >> (8 * rot)) | (pattern8 << (64 - 8 * rot));
    FillPush pc{static_cast<uint32_t>(at - base),
                static_cast<uint32_t>(stop - base),
                {static_cast<uint32_t>(p), static_cast<uint32_t>(p >> 32)}};
    if (!first) barrier();  // windows of one fill may share a partial word
    first = false;
    push_window(*this, d.fill_layout, buf, base, range);
    d.fn.vkCmdPushConstants(cb, d.fill_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
    const uint64_t words = (pc.end + 3) / 4 - pc.first / 4;
    d.fn.vkCmdDispatch(cb, groups_for(words, kFillGroup), 1, 1);
    at = stop;
  }
}

// Overlapping ranges of one buffer go through the scratch buffer in chunks, in the order
// memmove would use, so that no chunk reads bytes an earlier chunk already overwrote.
void Recorder::copy(VkBuffer src, VkDeviceSize src_off, VkBuffer dst, VkDeviceSize dst_off,
                    VkDeviceSize n) const {
  if (n == 0 || (src == dst && src_off == dst_off)) return;
  const bool overlap = src == dst && src_off < dst_off + n && dst_off < src_off + n;
  if (!overlap) {
    VkBufferCopy region{src_off, dst_off, n};
    d.fn.vkCmdCopyBuffer(cb, src, dst, 1, &region);
    return;
  }
  const VkDeviceSize chunk = scratch_bytes;
  const bool backward = dst_off > src_off;
  const VkDeviceSize count = (n + chunk - 1) / chunk;
  for (VkDeviceSize i = 0; i < count; ++i) {
    const VkDeviceSize k = backward ? count - 1 - i : i;
    const VkDeviceSize at = k * chunk;
    const VkDeviceSize len = std::min(chunk, n - at);
    if (i > 0) barrier();  // the scratch buffer is reused
    VkBufferCopy in{src_off + at, 0, len};
    d.fn.vkCmdCopyBuffer(cb, src, scratch, 1, &in);
    barrier();
    VkBufferCopy out{0, dst_off + at, len};
    d.fn.vkCmdCopyBuffer(cb, scratch, dst, 1, &out);
  }
}

// Elements are written window by window. A destination that is not aligned to the element
// size is generated into the scratch buffer and copied from there.
void Recorder::random(VkBuffer buf, VkDeviceSize buf_size, VkDeviceSize offset,
                      const backend::RandomParams& p) const {
  if (p.count == 0 || !random_supported(p.op, p.dtype)) return;
  const uint64_t es = backend::random_element_size(p.dtype);
  const uint64_t epb = 4 / backend::random_words_per_element(p);
  const bool direct = offset % es == 0;
  // Elements per dispatch: whole blocks, with room for the window's alignment slack.
  const VkDeviceSize span =
      direct ? d.window_bytes - d.window_align : std::min(d.window_bytes, scratch_bytes);
  const uint64_t chunk = std::max<uint64_t>(span / es / epb, 1) * epb;

  RandomPush pc{};
  backend::pack_random_args(p, pc, [](double v) { return v; });

  d.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.random_pipeline(p));
  for (uint64_t c0 = 0; c0 < p.count; c0 += chunk) {
    const uint64_t c1 = std::min(p.count, c0 + chunk);
    const uint64_t k0 = c0 / epb;  // c0 is a multiple of epb
    const uint64_t blk = p.offset + k0;
    pc.block0[0] = static_cast<uint32_t>(blk);
    pc.block0[1] = static_cast<uint32_t>(blk >> 32);
    pc.nblocks = static_cast<uint32_t>((c1 - c0 + epb - 1) / epb);
    pc.e_lo = 0;
    pc.e_hi = static_cast<uint32_t>(c1 - c0);
    VkBuffer target = scratch;
    VkDeviceSize base = 0, range_bytes = std::min(d.window_bytes, scratch_bytes);
    if (direct) {
      const VkDeviceSize origin = offset + c0 * es;
      base = origin / d.window_align * d.window_align;
      range_bytes = std::min(d.window_bytes, buf_size - base);
      target = buf;
      pc.dst_off = static_cast<uint32_t>(origin - base);
    } else {
      pc.dst_off = 0;
    }
    if (c0 > 0) barrier();  // neighbouring chunks may share a partial word (or the scratch)
    push_window(*this, d.random_layout, target, base, range_bytes);
    d.fn.vkCmdPushConstants(cb, d.random_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
    d.fn.vkCmdDispatch(cb, groups_for(pc.nblocks, kRandomGroup), 1, 1);
    if (!direct) {
      barrier();
      VkBufferCopy region{0, offset + c0 * es, (c1 - c0) * es};
      d.fn.vkCmdCopyBuffer(cb, scratch, buf, 1, &region);
    }
  }
}

}  // namespace mpsrt::vk
