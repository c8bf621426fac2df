"""Events (torch.cuda / torch.mps names)."""

from __future__ import annotations

from . import _C

Event = _C.Event

__all__ = ["Event"]
