// Autocast on the mpsrt device (torch.autocast("mpsrt", dtype=float16 / bfloat16)): torch's op
// lists and cast policies for an autocast key, as torch registers them for its own devices;
// every other op falls through to the device's kernels. binary_cross_entropy is banned under
// autocast with CUDA's error, as torch bans it on CUDA.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// In at::autocast: the op lists name at:: types unqualified.
namespace at::autocast {
namespace {

// CUDA's ban, word for word (torch registers it for its CUDA autocast key only).
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits "
              "are\nsafe to autocast.");
}
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define MPSRT_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define MPSRT_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define MPSRT_AUTOCAST_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define MPSRT_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(MPSRT_AUTOCAST_LOWER)
  AT_FORALL_FP32(MPSRT_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(MPSRT_AUTOCAST_FP32_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(MPSRT_AUTOCAST_PROMOTE)
#undef MPSRT_AUTOCAST_LOWER
#undef MPSRT_AUTOCAST_FP32
#undef MPSRT_AUTOCAST_FP32_OPT_DTYPE
#undef MPSRT_AUTOCAST_PROMOTE
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
}
}  // namespace
}  // namespace at::autocast
