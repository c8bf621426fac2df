// Running sums and products (cumsum, cumprod) and multinomial sampling on mpsrt's scan kernel
// (csrc/kernels/scan/). The input is read as rows along the scanned dim (a strided input is
// made contiguous first); float32 / float16 / bfloat16 inputs scan in float32, integer and bool
// inputs in 64-bit integers (int64 output by default, as torch). float64 and complex decline.
// multinomial draws from mpsrt's Philox generator (uniform_ on the device): with replacement a
// binary search of each row's running sums, without it the top num_samples of p / E with E
// exponential (torch's method).
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumprod_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/multinomial_ops.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/where.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "ops/common.h"
#include "scan/scan.h"

namespace mpsrt::torch_glue::ops::scan {
namespace {

using namespace mpsrt::kernels::scan;  // NOLINT: the kernel's interface

// The dtypes the scan reads and writes.
bool scan_dtype(at::ScalarType s) {
  return is_float(s) || s == at::kLong || s == at::kInt || s == at::kShort || s == at::kChar ||
         s == at::kByte || s == at::kBool;
}

// Workgroups for `items` (row, segment) items, each workgroup looping over several.
Launch& item_groups(Launch& l, uint64_t items) {
  return l.groups(static_cast<uint32_t>(std::min<uint64_t>(items, 65535)));
}

// Scans contiguous x along dim into contiguous out (same sizes); false where it declines.
bool run_scan(const at::Tensor& x, int64_t dim, bool prod, at::Tensor& out) {
  const int64_t n = x.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t rows = x.numel() / n;
  const int64_t segs = (n + SEGMENT - 1) / SEGMENT;
  if (!fits<int32_t>(x.numel(), rows * segs, segs * SEGMENT * inner)) return false;
  Push g{};
  g.rows = static_cast<uint32_t>(rows);
  g.n = static_cast<uint32_t>(n);
  g.inner = static_cast<uint32_t>(inner);
  g.segs = static_cast<uint32_t>(segs);
  g.xo = g.yo = static_cast<uint32_t>(n * inner);
  g.xk = g.yk = static_cast<uint32_t>(inner);
  const bool int_math = !at::isFloatingType(out.scalar_type());
  at::Tensor totals = at::empty({std::max<int64_t>(rows * segs, 1)}, x.options().dtype(at::kLong));
  for (const uint32_t op : {OP_TOTALS, OP_SCAN}) {
    if (op == OP_TOTALS && segs == 1) continue;
    Launch l("scan", x.device().index());
    l.spec(SPEC_OP, op).spec(SPEC_DTX, dt(x)).spec(SPEC_DTY, dt(out));
    l.spec(SPEC_INT_MATH, int_math ? 1 : 0).spec(SPEC_PROD, prod ? 1 : 0);
    l.arg(out, op == OP_SCAN).arg(x, false).arg(totals, op == OP_TOTALS);
    if (!item_groups(l.push(g), static_cast<uint64_t>(rows * segs)).run()) return false;
  }
  return true;
}

// cumsum / cumprod(self, dim, dtype) into out (undefined: a new tensor; in place: self;
// out=: a contiguous tensor of self's sizes and the result's dtype).
template <bool kProd>
struct Cum {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim_arg,
                                       std::optional<at::ScalarType> dtype) {
    if (self.dim() == 0) return std::nullopt;
    const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
    const at::ScalarType in = self.scalar_type();
    at::ScalarType res = dtype ? *dtype : (at::isIntegralType(in, true) ? at::kLong : in);
    if (out.defined() && !dtype) res = out.scalar_type();
    if (!scan_dtype(in) || !scan_dtype(res) || res == at::kBool) return std::nullopt;
    if (at::isFloatingType(in) && !at::isFloatingType(res)) return std::nullopt;
    if (out.defined() &&
        (out.sizes() != self.sizes() || out.scalar_type() != res || !out.is_contiguous())) {
      return std::nullopt;
    }
    const at::Tensor x = self.contiguous();
    at::Tensor y = out.defined() ? out : at::empty(self.sizes(), self.options().dtype(res));
    if (y.numel() > 0) {
      // An in-place scan reads each element before it writes it, within one segment's item,
      // and later segments read only the totals: safe on self itself.
      if (!run_scan(x, dim, kProd, y)) return std::nullopt;
    }
    out = y;
    return y;
  }
};

// multinomial's checks, as torch's CPU kernel makes them (one read of the device's answer).
void check_distribution(const at::Tensor& p, int64_t samples, bool replacement) {
  TORCH_CHECK(p.dim() > 0 && p.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(samples > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n = p.size(-1);
  TORCH_CHECK(replacement || samples <= n,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  // A NaN makes the minimum NaN, an inf (with no negative element) the largest sum inf.
  const double low = p.min().item<double>();
  TORCH_CHECK(low >= 0, "probability tensor contains either `inf`, `nan` or element < 0");
  const at::Tensor sums = p.sum(-1, false, at::kFloat);
  TORCH_CHECK(std::isfinite(sums.max().item<double>()),
              "probability tensor contains either `inf`, `nan` or element < 0");
  TORCH_CHECK(sums.min().item<double>() > 0,
              "invalid multinomial distribution (sum of probabilities <= 0)");
  TORCH_CHECK(replacement || p.gt(0).sum(-1).min().item<int64_t>() >= samples,
              "invalid multinomial distribution (with replacement=False, not enough non-negative "
              "category to sample)");
}

std::optional<at::Tensor> multinomial(const at::Tensor& self, int64_t samples, bool replacement,
                                      std::optional<at::Generator> gen) {
  if (!is_float(self.scalar_type())) return std::nullopt;
  check_distribution(self, samples, replacement);
  const at::Tensor p = self.dim() == 1 ? self.unsqueeze(0) : self;
  const int64_t rows = p.size(0), n = p.size(1);
  at::Tensor out;
  if (!replacement) {
    // Exponential E = -log(1 - u); categories of probability 0 never come first.
    at::Tensor q = at::empty({rows, n}, p.options().dtype(at::kFloat));
    q.uniform_(0.0, 1.0, gen);
    q = q.neg_().add_(1.0).log_().neg_();
    const at::Tensor pf = p.to(at::kFloat);
    const at::Tensor score = at::where(pf.gt(0), pf.div(q), -1.0);
    out = samples == 1 ? at::argmax(score, -1, true) : std::get<1>(at::topk(score, samples));
  } else {
    if (!fits<int32_t>(rows * n, rows * samples)) return std::nullopt;
    at::Tensor u = at::empty({rows, samples}, p.options().dtype(at::kFloat));
    u.uniform_(0.0, 1.0, gen);
    at::Tensor c = at::empty({rows, n}, p.options().dtype(at::kFloat));
    if (!run_scan(p.contiguous(), 1, false, c)) return std::nullopt;
    out = at::empty({rows, samples}, p.options().dtype(at::kLong));
    Push g{};
    g.rows = static_cast<uint32_t>(rows);
    g.n = static_cast<uint32_t>(n);
    g.m = static_cast<uint32_t>(samples);
    Launch l("scan", p.device().index());
    l.spec(SPEC_OP, OP_SAMPLE).arg(out, true).arg(c, false).arg(u, false);
    if (!l.push(g).grid(static_cast<uint64_t>(rows * samples), LOCAL).run()) return std::nullopt;
  }
  return self.dim() == 1 ? out.squeeze(0) : out;
}

namespace A = at::_ops;

void register_scan(torch::Library& m) {
  reg<A::cumsum, Functional<Cum<false>>>(m);
  reg<A::cumsum_, Inplace<Cum<false>>>(m);
  reg<A::cumsum_out, Out<Cum<false>>>(m);
  reg<A::cumprod, Functional<Cum<true>>>(m);
  reg<A::cumprod_, Inplace<Cum<true>>>(m);
  reg<A::cumprod_out, Out<Cum<true>>>(m);
  reg<A::multinomial, &multinomial>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::scan

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::scan::register_scan(m);
}
