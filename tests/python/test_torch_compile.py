"""torch.compile on the PyTorch device: inductor (the default backend) generates its C++/OpenMP
CPU code for mpsrt tensors on host-visible memory, inference and training graphs, and runs it
after the device's queued work; discrete memory is refused with an error that names
backend="aot_eager", which compiles there (its graphs run the device's ops as in eager mode)."""

from __future__ import annotations

import copy
import gc
import threading
from collections.abc import Iterator

import mpsrt
import pytest
from conftest import blocked, is_unified
from kernel_check import assert_close, torch

pytestmark = [
    pytest.mark.needs_compiler,  # inductor compiles C++ (CXX, else c++)
    # Importing inductor uses deprecated torch.jit decorators (torch's own warning).
    pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning"),
]


class Net(torch.nn.Module):
    """Convolution, batch norm, pooling, linear layers, layer norm, softmax: extern kernels
    (convolution, matmul) between inductor's own fused C++ kernels, reductions among them; in
    training, overlapping max-pooling's gradient under an average pool's (a scatter-add that
    inductor's C++ code once mis-indexed when generated for a device other than "cpu")."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 3, 2, 1)
        x = torch.nn.functional.adaptive_avg_pool2d(x, (4, 4))
        x = torch.nn.functional.gelu(self.fc(x.flatten(1)))
        return torch.softmax(self.norm(x), -1)


def _model_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Net().eval(), torch.randn(2, 3, 16, 16)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    # Every test compiles anew (dynamo's cache keys on code objects, not on the runtime), and
    # leaves no device tensors in dynamo's caches when the runtime is re-created.
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    gc.collect()


def test_inductor_compiles_inference_to_cpu_code_on_host_memory(backend: str) -> None:
    from torch._inductor import metrics as inductor_metrics

    model, x = _model_and_input()
    with torch.no_grad():
        expected = model(x)
        on_device = copy.deepcopy(model).to("mpsrt")
        compiled = torch.compile(on_device)
        if not is_unified():
            with pytest.raises(Exception, match='backend="aot_eager"'):
                compiled(x.to("mpsrt"))
            return
        before = inductor_metrics.generated_kernel_count
        got = compiled(x.to("mpsrt"))
        assert inductor_metrics.generated_kernel_count > before  # inductor's own code
        assert got.device.type == "mpsrt"
        assert_close(got, expected, atol=1e-5, rtol=1e-5)
        # A second call runs the compiled code again, on new values.
        x2 = torch.randn(2, 3, 16, 16)
        assert_close(compiled(x2.to("mpsrt")), model(x2), atol=1e-5, rtol=1e-5)


def test_compiled_kernels_run_after_the_devices_queued_work(unified_memory: None) -> None:
    # x's fill is queued behind a blocked stream when the compiled function is called: its C++
    # kernel must read the filled values, so it waits for the device first.
    compiled = torch.compile(lambda t: t * 2 + 1)
    with torch.no_grad():
        compiled(torch.zeros(4096, device="mpsrt"))  # compiles outside the blocked stretch
        x = torch.zeros(4096, device="mpsrt")
        with blocked(mpsrt.current_stream()) as gate:
            x.fill_(3.0)
            threading.Timer(0.05, gate.open).start()
            got = compiled(x)
    assert torch.equal(got.cpu(), torch.full((4096,), 7.0))


def test_inductor_compiles_a_training_step(unified_memory: None) -> None:
    model, x = _model_and_input()
    model.train()
    on_device = copy.deepcopy(model).to("mpsrt")
    torch.compile(on_device)(x.to("mpsrt")).square().sum().backward()
    model(x).square().sum().backward()
    for p_cpu, p_dev in zip(model.parameters(), on_device.parameters()):
        assert_close(p_dev.grad, p_cpu.grad, atol=1e-4, rtol=1e-4)
    # BatchNorm's running statistics, updated by the compiled forward in place.
    for b_cpu, b_dev in zip(model.buffers(), on_device.buffers()):
        assert_close(b_dev, b_cpu, atol=1e-5, rtol=1e-5)


def test_cpp_wrapper_mode_is_refused_clearly(unified_memory: None) -> None:
    compiled = torch.compile(lambda t: t.sin() + 1)
    with torch._inductor.config.patch(cpp_wrapper=True), torch.no_grad():
        with pytest.raises(Exception, match="cpp_wrapper is not supported on the mpsrt device"):
            compiled(torch.ones(8, device="mpsrt"))


def test_cpu_graphs_compile_as_before_beside_the_device(backend: str) -> None:
    # The device registers itself with inductor on any torch.compile (torch asks every
    # out-of-tree device), and answers some of inductor's questions for its own tensors only:
    # CPU graphs, the same process, compile and compute as without it.
    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(t.sin() * 2, -1).sum(0)

    x = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(f)(x), f(x), atol=1e-6, rtol=1e-6)
    assert torch._inductor.codegen.common.get_scheduling_for_device("mpsrt") is not None


def test_every_generated_kernel_call_waits_for_the_device(unified_memory: None) -> None:
    # Subgraphs too (torch.cond's branches have their own wrappers): each call of a generated
    # C++ kernel follows a wait for the device's queued work.
    from torch._inductor.utils import run_and_get_code

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() + 1, (x,))

    for sign in (1.0, -1.0):
        x = torch.rand(64) * sign
        with torch.no_grad():
            got, code = run_and_get_code(torch.compile(f), x.to("mpsrt"))
        torch.testing.assert_close(got.cpu(), f(x), atol=1e-6, rtol=1e-6)
    lines = [line.strip() for line in "\n".join(code).splitlines() if line.strip()]
    calls = [
        i
        for i, line in enumerate(lines)
        if line.startswith("cpp_fused") and "async_compile" not in line
    ]
    assert len(calls) >= 3  # the predicate's reduction and both branches
    for i in calls:
        assert lines[i - 1].startswith("mpsrt_wait_for"), lines[i - 1]
