"""Ops torch runs on accelerators only, on the mpsrt device through their decompositions.

Some aten ops have kernels for CUDA (or other devices) only: no CPU kernel, no composite one
(``_fused_rms_norm_backward``, ``_fused_dropout``, ``addmm.dtype``, ...). The device's fallback
runs an op's CPU kernel, so it cannot run these; where torch has a decomposition for one
(``torch._decomp.decomposition_table``: the same op written with other aten ops), it is
registered here as the op's mpsrt kernel, so the op runs as its decomposition's ops on the
device (on the device's kernels or through the fallback, each). Ops that already have an mpsrt
kernel (the fused RNN cells of csrc/torch/ops/rnn.cpp, ...) keep it. What is registered is in
``REGISTERED`` (names such as ``"aten::_fused_rms_norm_backward"``).
"""

from __future__ import annotations

import torch

# The dispatch keys whose kernel would serve the op on mpsrt (composite kernels) or through the
# fallback (CPU); an op with any of them needs no decomposition.
_SERVED_BY = (
    "CPU",
    "PrivateUse1",
    "CompositeImplicitAutograd",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)

REGISTERED: list[str] = []
_LIBRARY: torch.library.Library | None = None  # kept alive: it holds the registrations


def _needs_decomposition(op: torch._ops.OpOverload) -> bool:
    name = op.name()
    return not any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in _SERVED_BY)


def register() -> None:
    """Registers, once, torch's decomposition of every op that the device could not run
    otherwise (about a dozen in torch 2.13; a scan of ~1100 table entries, a few ms)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    from torch._decomp import decomposition_table

    _LIBRARY = torch.library.Library("aten", "IMPL")
    for op, fn in decomposition_table.items():
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            continue
        if _needs_decomposition(op):
            _LIBRARY.impl(op, fn, "PrivateUse1")
            REGISTERED.append(op.name())
    REGISTERED.sort()
