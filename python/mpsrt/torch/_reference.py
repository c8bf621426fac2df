"""CPU reference runs with mpsrt's random numbers: ``mpsrt.torch.cpu_reference_rng()``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
# The random ops the mpsrt device runs on mpsrt's own kernels (dropout's mask is bernoulli_).
_RANDOM_OPS = {
    _aten.uniform_.default,
    _aten.normal_.default,
    _aten.random_.default,
    _aten.random_.to,
    getattr(_aten.random_, "from"),
    _aten.bernoulli_.float,
}


class cpu_reference_rng(TorchDispatchMode):
    """Context manager: on CPU, the random ops that the mpsrt device runs on mpsrt's kernels
    (``uniform_``, ``normal_``, ``random_``, ``bernoulli_`` with a float p — so ``rand``,
    ``randn``, ``randint`` and dropout's mask too) draw from mpsrt's default generator instead
    of torch's CPU generator.

    With it, the same code run once on ``"mpsrt"`` and once on ``"cpu"`` after the same
    ``torch.manual_seed`` sees the same random numbers, so the two results can be compared
    (training with dropout included). Ops with an explicit ``generator=`` are left alone.
    """

    def __init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _RANDOM_OPS and kwargs.get("generator") is None:
            target = args[0]
            if isinstance(target, torch.Tensor) and target.device.type == "cpu":
                on_device = torch.empty_like(target, device="mpsrt")
                func(on_device, *args[1:], **kwargs)
                target.copy_(on_device.cpu())
                return target
        return func(*args, **kwargs)
