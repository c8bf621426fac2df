"""What the stress, soak and big-Buffer tests share: a fresh runtime per backend (a module of
its own, not a conftest.py: tests/python has the conftest that `from conftest import` finds)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import mpsrt
import pytest

BACKENDS = mpsrt.available_backends()


def _reset_runtime(backend: str) -> None:
    env = dict(os.environ)
    env["MPSRT_BACKEND"] = backend
    mpsrt._C._reset_runtime(env)


@pytest.fixture(params=BACKENDS)
def fresh_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh runtime on one backend; the backend in force before is restored afterwards (so
    this works whether or not tests/python's session fixture ran first)."""
    gc.collect()
    previous = mpsrt.backend()
    _reset_runtime(request.param)
    try:
        yield request.param
    finally:
        gc.collect()
        mpsrt.empty_cache()
        _reset_runtime(previous)
