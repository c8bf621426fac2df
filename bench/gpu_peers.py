"""The device peers of `python -m bench` (see peers.py for when each is used): torch on its
GPU device (torch.cuda, torch.mps), CuPy, and MLX's GPU stream.

Each operation allocates what it needs once and returns a function that queues the operation
without waiting for it; the caller times a batch of calls followed by `sync()`, the same way as
mpsrt's side. Operations a library lacks return None; the row then says so.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .peers import DevicePeer

Fn = Optional[Callable[[], object]]


class TorchPeer(DevicePeer):
    """torch on `device` ("cuda", "mps"; "cpu" only as a stand-in in tests, real=False)."""

    def __init__(self, device: str, name: str | None = None, real: bool = True) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.mod = getattr(torch, device)  # torch.cuda, torch.mps, torch.cpu
        self.name = name or f"torch.{device}"
        self.real = real
        torch.empty(1, device=device)  # starts the device's context here, not in a timed row

    def sync(self) -> None:
        self.mod.synchronize()

    def _dtype(self, dtype: str) -> Any:
        # torch's uint32 has few kernels: its 32-bit random bits come from int32.
        return getattr(self.torch, {"uint32": "int32"}.get(dtype, dtype))

    def tensor(self, nbytes: int, dtype: str = "uint8") -> Any:
        t = self._dtype(dtype)
        itemsize = self.torch.empty(0, dtype=t).element_size()
        return self.torch.empty(nbytes // itemsize, dtype=t, device=self.device)

    def fill(self, nbytes: int, dtype: str, value: float) -> Fn:
        t = self.tensor(nbytes, dtype)
        return lambda: t.fill_(value)

    def copy(self, nbytes: int) -> Fn:
        src, dst = self.tensor(nbytes), self.tensor(nbytes)
        src.fill_(1)
        return lambda: dst.copy_(src)

    def random(self, kind: str, dtype: str, nbytes: int) -> Fn:
        t = self.tensor(nbytes, dtype)
        return {
            "uniform": lambda: t.uniform_(),
            "normal": lambda: t.normal_(),
            "int": lambda: t.random_(0, 1000),
            "bernoulli": lambda: t.bernoulli_(0.3),
            "bits": lambda: t.random_(),
        }[kind]

    def empty(self, nbytes: int) -> Fn:
        torch, device = self.torch, self.device
        return lambda: torch.empty(nbytes, dtype=torch.uint8, device=device)

    def tiny_op_sync(self) -> Fn:
        t = self.tensor(4, "float32")
        sync = self.mod.synchronize

        def run() -> None:
            t.fill_(1.0)
            sync()

        return run

    def event(self) -> Fn:
        if not hasattr(self.mod, "Event"):
            return None
        e = self.mod.Event()

        def run() -> None:
            e.record()
            e.query()

        return run

    def host_to_device(self, host: Any) -> Fn:
        src = self.torch.from_numpy(host)  # pageable memory, as numpy's
        dst = self.tensor(host.nbytes)
        return lambda: dst.copy_(src)

    def device_to_host(self, nbytes: int) -> Fn:
        src = self.tensor(nbytes)
        src.fill_(1)
        return lambda: src.cpu()

    def streams(self, nbytes: int, count: int, batch: int) -> Fn:
        if not hasattr(self.mod, "Stream") or not hasattr(self.mod, "stream"):
            return None  # torch.mps has one queue
        mod = self.mod
        pairs = [(mod.Stream(), self.tensor(nbytes)) for _ in range(count)]

        def run() -> None:
            for s, t in pairs:
                with mod.stream(s):
                    for _ in range(batch):
                        t.fill_(2)
            mod.synchronize()

        return run

    def release(self) -> None:
        empty_cache = getattr(self.mod, "empty_cache", None)
        if empty_cache is not None:
            self.sync()
            empty_cache()

    def free_bytes(self) -> int | None:
        info = getattr(self.mod, "mem_get_info", None)
        return int(info()[0]) if info is not None and self.device == "cuda" else None


class CupyPeer(DevicePeer):
    """CuPy on its current device (CUDA or ROCm); its memory pool caches like torch's."""

    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self.cp = cupy
        cupy.empty(1)

    def sync(self) -> None:
        self.cp.cuda.Device().synchronize()

    def tensor(self, nbytes: int, dtype: str = "uint8") -> Any:
        return self.cp.empty(nbytes // np.dtype(dtype).itemsize, dtype=dtype)

    def fill(self, nbytes: int, dtype: str, value: float) -> Fn:
        a = self.tensor(nbytes, dtype)
        return lambda: a.fill(value)

    def copy(self, nbytes: int) -> Fn:
        src, dst = self.tensor(nbytes), self.tensor(nbytes)
        src.fill(1)
        cp = self.cp
        return lambda: cp.copyto(dst, src)

    def random(self, kind: str, dtype: str, nbytes: int) -> Fn:
        if dtype not in ("float32", "float64") or kind not in ("uniform", "normal"):
            return None
        r = self.cp.random
        n = nbytes // np.dtype(dtype).itemsize
        if kind == "uniform":
            return lambda: r.random_sample(n, dtype=dtype)  # allocates from the pool
        return lambda: r.standard_normal(n, dtype=dtype)

    def empty(self, nbytes: int) -> Fn:
        cp = self.cp
        return lambda: cp.empty(nbytes, dtype=cp.uint8)

    def tiny_op_sync(self) -> Fn:
        a = self.tensor(4, "float32")
        dev = self.cp.cuda.Device()

        def run() -> None:
            a.fill(1.0)
            dev.synchronize()

        return run

    def event(self) -> Fn:
        e = self.cp.cuda.Event()

        def run() -> None:
            e.record()
            _ = e.done

        return run

    def host_to_device(self, host: Any) -> Fn:
        dst = self.tensor(host.nbytes)
        return lambda: dst.set(host)

    def device_to_host(self, nbytes: int) -> Fn:
        src = self.tensor(nbytes)
        src.fill(1)
        return lambda: src.get()

    def release(self) -> None:
        self.sync()
        self.cp.get_default_memory_pool().free_all_blocks()

    def free_bytes(self) -> int | None:
        return int(self.cp.cuda.runtime.memGetInfo()[0])


class MlxPeer(DevicePeer):
    """MLX on its GPU stream (Apple). MLX arrays are immutable: a fill or random op makes a new
    array, evaluated (mx.eval waits for it)."""

    name = "mlx (gpu)"

    def __init__(self) -> None:
        import mlx.core as mx

        self.mx = mx
        self.gpu = mx.gpu

    def sync(self) -> None:
        sync = getattr(self.mx, "synchronize", None)
        if sync is not None:
            sync()

    def _mdtype(self, dtype: str) -> Any:
        return getattr(self.mx, {"bool": "bool_"}.get(dtype, dtype))

    def fill(self, nbytes: int, dtype: str, value: float) -> Fn:
        mx, n = self.mx, nbytes // np.dtype(dtype).itemsize
        t, s = self._mdtype(dtype), self.gpu
        return lambda: mx.eval(mx.full((n,), value, dtype=t, stream=s))

    def random(self, kind: str, dtype: str, nbytes: int) -> Fn:
        if dtype == "float64" or kind not in ("uniform", "normal"):
            return None
        mx, s, t = self.mx, self.gpu, self._mdtype(dtype)
        shape = (nbytes // np.dtype("uint16" if dtype == "bfloat16" else dtype).itemsize,)
        if kind == "uniform":
            return lambda: mx.eval(mx.random.uniform(shape=shape, dtype=t, stream=s))
        return lambda: mx.eval(mx.random.normal(shape=shape, dtype=t, stream=s))

    def tiny_op_sync(self) -> Fn:
        mx = self.mx
        a = mx.zeros((1,))
        return lambda: mx.eval(mx.add(a, 1, stream=self.gpu))


FACTORIES: dict[str, Callable[[], DevicePeer]] = {
    "torch.cuda": lambda: TorchPeer("cuda"),
    "torch.mps": lambda: TorchPeer("mps"),
    "cupy": CupyPeer,
    "mlx": MlxPeer,
}
