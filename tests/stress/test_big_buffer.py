"""One Buffer past 4 GiB on every backend: filled, random-filled and copied, checked by sampling.

Opt-in (too slow and too large for the README's test command): MPSRT_BIG_BUFFER_GIB=G runs it
with a Buffer of G GiB (CI: 4.5). Past 4 GiB are the byte offsets above 2^32, random fills of
more than 2^32 elements (uint8: one Philox word each) and, on vulkan, the heap's several
VkBuffers (lavapipe's largest is 4 GiB - 1; mpsrt binds them over one VkDeviceMemory). Each
check reads a slice of the Buffer through a view, so the host touches a few MiB only.

Not for the Khronos validation layer's run: the layer rejects allocations above lavapipe's
nominal 2 GiB memory heap, which lavapipe itself (memory is the host's) does not enforce.
"""

from __future__ import annotations

import os

import fresh_runtime
import mpsrt
import numpy as np
import pytest

GIB = 1 << 30
BIG_GIB = float(os.environ.get("MPSRT_BIG_BUFFER_GIB", "0"))

fresh_backend = fresh_runtime.fresh_backend  # a fresh runtime on one backend per test

pytestmark = pytest.mark.skipif(
    BIG_GIB <= 0, reason="set MPSRT_BIG_BUFFER_GIB (e.g. 4.5) to run the big-Buffer test"
)


def _slice(buf: mpsrt.Buffer, at: int, n: int) -> np.ndarray:
    return buf.view(at, n).numpy().copy()


def _ref_random_u8(seed: int, first: int, n: int) -> np.ndarray:
    """Elements [first, first + n) of random_() on uint8 from (seed, offset 0): element i is
    word i of the stream (block i // 4), so a fresh fill from block first // 4 gives them."""
    assert first % 4 == 0
    g = mpsrt.Generator().manual_seed(seed)
    g.set_offset(first // 4)
    return mpsrt.empty(n, dtype="uint8").random_(generator=g).numpy().copy()


def test_a_buffer_past_4_gib(fresh_backend: str) -> None:
    n = int(BIG_GIB * GIB) // 4096 * 4096
    props = mpsrt.get_device_properties()
    if props.max_buffer_size < n:
        pytest.skip(f"{fresh_backend}: max_buffer_size is {props.max_buffer_size >> 20} MiB")
    buf = mpsrt.empty(n, dtype="uint8")
    assert buf.nbytes == n
    # Where to look: both ends, around 2^31, 2^32 and lavapipe's VkBuffer edges, and spots
    # spread over the whole Buffer.
    k = 1 << 16
    spots = {0, (1 << 31) - k // 2, (1 << 32) - k // 2, (1 << 32), n - k}
    spots |= {(4094 - 128) << 20, (4094 << 20) - k // 2}  # lavapipe: the second VkBuffer's start
    spots |= {int(x) // 4 * 4 for x in np.linspace(0, n - k, 13)}
    spots = sorted(s for s in spots if 0 <= s <= n - k)

    buf.fill_(0x5A)
    for at in spots:
        assert (_slice(buf, at, k) == 0x5A).all(), f"fill: bytes at {at}"

    # More than 2^32 elements: the Philox block counter and the element counts pass 32 bits.
    seed = 0xB16
    buf.random_(generator=mpsrt.Generator().manual_seed(seed))
    for at in spots:
        assert np.array_equal(_slice(buf, at, k), _ref_random_u8(seed, at, k)), f"random: {at}"

    # Copies: the first half onto the second (offsets agree mod 16: the kernel on vulkan), then
    # offsets that agree mod nothing (vkCmdCopyBuffer on vulkan) into a range across 4 GiB.
    half = n // 2 // 4096 * 4096
    buf.view(half, half).copy_(buf.view(0, half))
    for at in spots:
        if at + k <= half:
            assert np.array_equal(_slice(buf, half + at, k), _ref_random_u8(seed, at, k)), (
                f"copy: {half + at}"
            )
    dst, src, m = n - GIB - 4093, 5, GIB  # ends 4093 bytes before the end
    before_end = _slice(buf, n - 4093, 4093)
    buf.view(dst, m).copy_(buf.view(src, m))
    for at in (0, m // 2, m - k):
        want = _ref_random_u8(seed, src + at - 1, k + 4)[1 : k + 1]
        assert np.array_equal(_slice(buf, dst + at, k), want), f"odd copy: {dst + at}"
    assert np.array_equal(_slice(buf, n - 4093, 4093), before_end), "bytes after the copy"
    del buf
