// The mpsrt device's random operators: mpsrt's random kernels on the current stream, from
// mpsrt's generators: with torch.mpsrt.manual_seed(s), torch.rand(n, device="mpsrt") equals
// mpsrt.rand(n) bit for bit (same Philox words, same word-to-value mapping). Dtypes mpsrt cannot
// write (complex, ...) run torch's CPU kernel with a CPU generator seeded from the mpsrt
// generator. Also dropout's kernel, on mpsrt's bernoulli.
#include <ATen/core/Tensor.h>
#include <ATen/ops/bernoulli_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/normal_ops.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/random_ops.h>
#include <ATen/ops/uniform_ops.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <tuple>

#include "device/generator.h"
#include "device/host_access.h"
#include "device/runtime_client.h"
#include "ops/common.h"

namespace mpsrt::torch_glue::ops::random {
namespace {

// Fills `self` with mpsrt's kernel when it can write self's dtype (true); false: it cannot.
bool mpsrt_random(const at::Tensor& self, MpsrtRandomSpec spec,
                  const std::optional<at::Generator>& gen) {
  spec.dtype = dtype_id(self.scalar_type());
  if (spec.dtype < 0 || api().random_supported(spec.op, spec.dtype) == 0) return false;
  MpsrtGeneratorImpl* g = generator_for(gen, self.device());
  if (self.numel() == 0) return true;
  const c10::DeviceGuard guard(self.device());
  MpsrtStream* stream = current_stream(self.device().index());
  size_t off = 0;
  MpsrtBuffer* b = buffer_of(self, &off);
  if (b != nullptr && self.is_contiguous()) {
    check(
        api().random_fill(b, off, static_cast<uint64_t>(self.numel()), &spec, g->handle(), stream));
    return true;
  }
  // Strided: the numbers in a contiguous tensor, then copied into place (in stream order).
  at::Tensor tmp = at::empty(self.sizes(), self.options());
  MpsrtBuffer* tb = buffer_of(tmp, &off);
  check(api().random_fill(tb, off, static_cast<uint64_t>(tmp.numel()), &spec, g->handle(), stream));
  const_cast<at::Tensor&>(self).copy_(tmp);
  return true;
}

// torch's CPU kernel on an alias of `self`, with a CPU generator seeded from the mpsrt one.
template <class F>
void cpu_random(const at::Tensor& self, const std::optional<at::Generator>& gen, F&& f) {
  at::Generator cg = cpu_generator_from(generator_for(gen, self.device()));
  update_on_host(self, [&](const at::Tensor& h) { f(h, cg); });
}

MpsrtRandomSpec random_spec(int op) {
  MpsrtRandomSpec s{};
  s.op = op;
  s.b = 1.0;
  s.range = 1;
  s.p = 0.5;
  return s;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
              " > to=", to);
  MpsrtRandomSpec spec = random_spec(MPSRT_RANDOM_UNIFORM);
  spec.a = from;
  spec.b = to;
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.uniform_(from, to, cg); });
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  MpsrtRandomSpec spec = random_spec(MPSRT_RANDOM_NORMAL);
  spec.a = mean;
  spec.b = std;
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.normal_(mean, std, cg); });
  return self;
}

// random_(from, to): [from, to); to = None: up to torch's default bound for the dtype.
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  MpsrtRandomSpec spec = random_spec(MPSRT_RANDOM_INT_RANGE);
  spec.low = from;
  const int d = dtype_id(self.scalar_type());
  if (to.has_value()) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from,
                " >= to=", *to);
    spec.range = static_cast<uint64_t>(*to) - static_cast<uint64_t>(from);
  } else if (d >= 0) {
    int64_t lo = 0;
    uint64_t hi = 0;
    check(api().random_int_bounds(d, &lo, &hi));
    TORCH_CHECK(from < 0 || static_cast<uint64_t>(from) < hi,
                "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", hi);
    spec.range = hi - static_cast<uint64_t>(from);
  }
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.random_(from, to, cg); });
  return self;
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, std::move(gen));
}

at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  if (dtype_id(self.scalar_type()) < 0) {
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.random_(cg); });
    return self;
  }
  return random_from(self, 0, std::nullopt, std::move(gen));
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  MpsrtRandomSpec spec = random_spec(MPSRT_RANDOM_BERNOULLI);
  spec.p = p;
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.bernoulli_(p, cg); });
  return self;
}

// dropout's kernel (torch picks native_dropout for PrivateUse1 devices): the mask from mpsrt's
// bernoulli kernel (bool, 1 = kept), the output input * mask / (1 - p), as torch's CPU kernel.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  auto bool_opts = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, bool_opts)};
  if (input.numel() == 0) return {input, at::empty_like(input, bool_opts)};
  TORCH_CHECK(0 <= p && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const double keep = 1.0 - p;
  const double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, bool_opts, at::MemoryFormat::Contiguous);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::random

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace r = mpsrt::torch_glue::ops::random;
  namespace A = at::_ops;
  using mpsrt::torch_glue::ops::reg;
  reg<A::uniform_, &r::uniform_>(m);
  reg<A::normal_, &r::normal_>(m);
  reg<A::random__from, &r::random_from>(m);
  reg<A::random__to, &r::random_to>(m);
  reg<A::random_, &r::random_default>(m);
  reg<A::bernoulli__float, &r::bernoulli_float>(m);
  reg<A::native_dropout, &r::native_dropout>(m);
}
