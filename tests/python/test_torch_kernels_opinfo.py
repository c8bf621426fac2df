"""The PyTorch device's kernels against torch CPU over PyTorch's own OpInfo samples (the inputs
torch's test suite runs every op with: broadcasting, scalars, empty and non-contiguous tensors,
keyword arguments), on every backend; where the device runs kernels (`device_kernels`), the
samples run on them unless the op declines one (a dtype or shape its kernel does not take), and
each op here must run at least one of its float32 samples on its kernel.

MPSRT_TEST_OPINFO_SAMPLES caps the samples per op and dtype (default 4: the README's test
command stays within its time); `all` runs every sample (CI's extended step)."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
from kernel_check import assert_close, to_device, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

common_methods_invocations = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations",
    reason="torch's OpInfo database needs expecttest: pip install expecttest",
)

_CAP = os.environ.get("MPSRT_TEST_OPINFO_SAMPLES", "4")
CAP = None if _CAP == "all" else int(_CAP)

# OpInfo names whose aten ops have kernels, with the dtypes their kernels take.
FLOAT = (torch.float32,)
HALF = (torch.float32, torch.float16, torch.bfloat16)
# "name.variant" for OpInfos with variants (div's rounding modes).
OPS: dict[str, tuple[torch.dtype, ...]] = {
    # element-wise (csrc/kernels/elementwise/)
    "add": (*HALF, torch.int64),
    "sub": (*HALF, torch.int64),
    "mul": (*HALF, torch.int64, torch.bool),
    "div.no_rounding_mode": HALF,
    "div.trunc_rounding": FLOAT,
    "div.floor_rounding": FLOAT,
    "neg": (*HALF, torch.int64),
    "abs": (*HALF, torch.int32),
    "exp": HALF,
    "log": HALF,
    "sqrt": HALF,
    "rsqrt": FLOAT,
    "reciprocal": FLOAT,
    "pow": FLOAT,
    "tanh": HALF,
    "sigmoid": HALF,
    "sin": FLOAT,
    "cos": FLOAT,
    "nn.functional.relu": HALF,
    "nn.functional.gelu": HALF,
    "nn.functional.silu": HALF,
    "nn.functional.hardswish": HALF,
    "where": (torch.float32, torch.int64),
    "eq": (torch.float32, torch.int64),
    "ne": FLOAT,
    "lt": FLOAT,
    "le": FLOAT,
    "gt": FLOAT,
    "ge": (torch.float32, torch.int32),
    "masked_fill": HALF,
    "clamp": FLOAT,
    "clamp_min": FLOAT,
    "clamp_max": FLOAT,
    "maximum": FLOAT,
    "minimum": FLOAT,
    "logical_not": (torch.float32, torch.bool),
    "cat": (torch.float32, torch.float16, torch.int64),
    "stack": FLOAT,
    "isinf": FLOAT,
    "isnan": FLOAT,
    "isneginf": FLOAT,
    "isposinf": FLOAT,
    "all": (torch.float32, torch.bool),
    "any": (torch.float32, torch.bool),
    # reductions, softmax, layer norm (csrc/kernels/reduce/, norm/)
    "sum": HALF,
    "mean": HALF,
    "amax": FLOAT,
    "amin": FLOAT,
    "argmax": FLOAT,
    "argmin": FLOAT,
    "var": FLOAT,
    "std": FLOAT,
    "softmax": HALF,
    "log_softmax": HALF,
    "nn.functional.layer_norm": HALF,
    # matrix products (csrc/kernels/gemm/)
    "mm": HALF,
    "bmm": FLOAT,
    "addmm": FLOAT,
    "baddbmm": FLOAT,
    "matmul": FLOAT,
    "nn.functional.linear": FLOAT,
    # indexing, losses (csrc/kernels/index/, loss/)
    "index_select": (torch.float32, torch.int64),
    "gather": FLOAT,
    "scatter_add": FLOAT,
    "nn.functional.embedding": FLOAT,
    "nn.functional.nll_loss": FLOAT,
    "nn.functional.cross_entropy": FLOAT,
    "nn.functional.mse_loss": FLOAT,
    # activations (csrc/kernels/elementwise/), tril / triu and roll (csrc/kernels/factory/; the
    # factories' samples make CPU tensors: test_torch_kernels_act.py tests them)
    "nn.functional.hardsigmoid": HALF,
    "nn.functional.leaky_relu": HALF,
    "nn.functional.elu": HALF,
    "nn.functional.selu": FLOAT,
    "nn.functional.celu": FLOAT,
    "nn.functional.softplus": HALF,
    "nn.functional.mish": HALF,
    "nn.functional.hardtanh": HALF,
    "nn.functional.relu6": HALF,
    "nn.functional.prelu": HALF,
    "tril": (torch.float32, torch.int64, torch.bool),
    "triu": (torch.float32, torch.float16),
    "roll": (torch.float32, torch.int64),
    # pooling and resampling (csrc/kernels/pool/); FLOAT where torch CPU's float16 / bfloat16
    # results are further from the exact ones than the kernels' (float32 math)
    "nn.functional.max_pool1d": HALF,
    "nn.functional.max_pool2d": HALF,
    "nn.functional.max_pool3d": HALF,
    "max_pool2d_with_indices_backward": HALF,
    "nn.functional.avg_pool1d": HALF,
    "nn.functional.avg_pool2d": HALF,
    "nn.functional.avg_pool3d": FLOAT,
    "nn.functional.adaptive_avg_pool1d": HALF,
    "nn.functional.adaptive_avg_pool2d": HALF,
    "nn.functional.adaptive_avg_pool3d": FLOAT,
    "nn.functional.adaptive_max_pool1d": HALF,
    "nn.functional.adaptive_max_pool2d": HALF,
    "nn.functional.adaptive_max_pool3d": HALF,
    "nn.functional.interpolate.nearest": HALF,
    "nn.functional.interpolate.nearest-exact": HALF,
    "nn.functional.interpolate.linear": FLOAT,
    "nn.functional.interpolate.bilinear": HALF,
    "nn.functional.interpolate.trilinear": FLOAT,
    "nn.functional.interpolate.bicubic": FLOAT,
    "nn.functional.interpolate.area": FLOAT,
    "nn.functional.upsample_nearest": HALF,
    "nn.functional.upsample_bilinear": HALF,
    # scans, sorting, indexed writes (csrc/kernels/scan/, sort/, index/)
    "cumsum": (*HALF, torch.int64),
    "cumprod": FLOAT,
    "sort": (torch.float32, torch.int64),
    "argsort": FLOAT,
    "topk": FLOAT,
    "scatter": FLOAT,
    "index_put": FLOAT,
    "masked_scatter": FLOAT,
    "__getitem__": FLOAT,
    "nn.functional.embedding_bag": FLOAT,
    "scatter_reduce.sum": FLOAT,
    "scatter_reduce.amax": FLOAT,
    "scatter_reduce.mean": FLOAT,
    # convolutions (csrc/kernels/conv/)
    "nn.functional.conv1d": HALF,
    "nn.functional.conv2d": HALF,
    "nn.functional.conv3d": HALF,
    # float16 / bfloat16: torch CPU rounds a transposed convolution's partial sums to the dtype,
    # beyond the tolerance of the device's float32 sums (test_torch_kernels_conv.py checks them).
    "nn.functional.conv_transpose1d": FLOAT,
    "nn.functional.conv_transpose2d": FLOAT,
    "nn.functional.conv_transpose3d": FLOAT,
    # batch / group / instance norm (csrc/kernels/norm/batch_norm.comp); RMS norm (composite)
    "nn.functional.batch_norm": FLOAT,  # half dtypes: test_torch_kernels_bnorm.py (its tolerances)
    "nn.functional.group_norm": FLOAT,
    # bfloat16: torch CPU rounds intermediates (off by 10 ulp from the float64 result where the
    # kernel is within 3 in the samples checked), beyond the bfloat16 tolerance
    "nn.functional.instance_norm": (torch.float32, torch.float16),
    "nn.functional.rms_norm": HALF,
}

_BY_NAME = {
    f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name: o
    for o in common_methods_invocations.op_db
}


def _as_float64(value: Any) -> Any:
    """float32 tensors (also in lists, tuples and dicts) in float64; anything else as is."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.dtype == torch.float32 else value
    if isinstance(value, (list, tuple)):
        return type(value)(_as_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_float64(v) for k, v in value.items()}
    return value


def assert_as_exact_as_cpu(op: Any, sample: Any, got: Any, expected: Any) -> None:
    """got equals torch CPU's float32 result within the tolerance, or else is as close to the
    exact result (the op in float64) as torch CPU's own result is, give or take a factor of 2:
    a kernel that sums in another order than the CPU's (a matrix product's tiles) may differ
    from it by more than the tolerance where values cancel, yet be no less accurate."""
    try:
        assert_close(got, expected)
    except AssertionError:
        if not isinstance(expected, torch.Tensor) or expected.dtype != torch.float32:
            raise
        exact = op(
            _as_float64(sample.input), *_as_float64(sample.args), **_as_float64(sample.kwargs)
        )
        device_error = (got.cpu().double() - exact).abs().max().item()
        cpu_error = (expected.double() - exact).abs().max().item()
        assert device_error <= 2 * cpu_error + 1e-6, (
            f"the device's result is {device_error:.3g} from the exact one, torch CPU's "
            f"{cpu_error:.3g}"
        )


def _params() -> list[Any]:
    return [
        pytest.param(name, dtype, id=f"{name}-{str(dtype).removeprefix('torch.')}")
        for name, dtypes in OPS.items()
        for dtype in dtypes
    ]


@pytest.mark.parametrize(("name", "dtype"), _params())
def test_opinfo_samples(device_kernels: bool, name: str, dtype: torch.dtype) -> None:
    op = _BY_NAME[name]
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    if CAP is not None:
        samples = samples[:CAP]
    assert samples, f"OpInfo {name} has no samples for {dtype}"
    on_kernels = 0
    for sample in samples:
        with warnings.catch_warnings():
            # Samples torch itself warns about (var's degrees of freedom <= 0, ...), on both sides.
            warnings.simplefilter("ignore", UserWarning)
            expected = op(sample.input, *sample.args, **sample.kwargs)
            torch.mpsrt.reset_fallback_counts()
            got = op(to_device(sample.input), *to_device(sample.args), **to_device(sample.kwargs))
        if not torch.mpsrt.fallback_counts():
            on_kernels += 1
        assert_as_exact_as_cpu(op, sample, got, expected)
    if device_kernels and dtype == torch.float32:
        assert on_kernels > 0, f"no float32 sample of {name} ran on its kernel"
