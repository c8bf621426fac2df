"""Strided Buffer views (issue 28 item 7): `Buffer.narrow(dim, start, length)` along any
dimension gives torch's view -- the same shape, element strides, offset and memory as torch's
`Tensor.narrow` -- contiguous where torch's is, strided otherwise. What works on a strided view
(fill_, copy_ both ways, numpy(), DLPack, indexing, narrow) and what refuses it (view(), _raw(),
random fills). Runs on every backend (one device).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import mpsrt
import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _collect() -> Iterator[None]:
    """pytest.raises keeps an exception whose traceback holds the test's frame (a cycle): its
    Buffers go at the next collection, which must come before a later test re-creates the
    runtime."""
    yield
    gc.collect()


def unified() -> bool:
    return mpsrt.get_device_properties(mpsrt.current_device()).unified_memory


def make(x: np.ndarray) -> mpsrt.Buffer:
    b = mpsrt.empty(x.shape, x.dtype.name)
    b.copy_(np.ascontiguousarray(x))
    return b


CASES = [
    ((4, 6), 1, 2, 3),
    ((4, 6), 0, 1, 2),
    ((4, 6), -1, -4, 4),
    ((1, 8), 1, 4, 4),
    ((3, 7, 2), 1, 3, 3),
    ((3, 7, 2), 2, 1, 1),
    ((3, 7, 2), 0, 2, 1),
    ((5, 3), 1, 3, 0),
    ((5, 3), 0, 5, 0),
]


@pytest.mark.parametrize(("shape", "dim", "start", "length"), CASES)
def test_narrow_matches_torch_layout(shape, dim: int, start: int, length: int) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    b = make(x)
    t = torch.from_numpy(x.copy())
    v, tv = b.narrow(dim, start, length), t.narrow(dim, start, length)
    assert v.shape == tuple(tv.shape)
    assert v.stride() == tv.stride()
    assert v.is_contiguous() == tv.is_contiguous()
    assert v.nbytes == tv.nbytes
    assert v.base is b
    assert v.data_ptr - b.data_ptr == tv.storage_offset() * 4
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    # Views of the view: indexing and narrowing again, as torch.
    if v.shape and v.shape[0] > 1 and len(v.shape) > 1:
        for key in (1, -1, slice(1, None)):
            w, tw = v[key], tv[key]
            assert (w.shape, w.stride(), w.is_contiguous()) == (
                tuple(tw.shape),
                tw.stride(),
                tw.is_contiguous(),
            )
            if w.nbytes:  # an empty view's address is not torch's storage offset
                assert w.data_ptr - b.data_ptr == tw.storage_offset() * 4
            np.testing.assert_array_equal(w.numpy(), tw.numpy())
        k = min(1, v.shape[-1])
        w, tw = v.narrow(-1, 0, k), tv.narrow(-1, 0, k)
        assert w.stride() == tw.stride()
        assert not w.nbytes or w.data_ptr - b.data_ptr == tw.storage_offset() * 4
        np.testing.assert_array_equal(w.numpy(), tw.numpy())


def test_narrow_torch_errors() -> None:
    b = mpsrt.empty((5, 3), "float32")
    t = torch.empty(5, 3)
    for args in ((2, 0, 1), (0, 6, 0), (0, -6, 1), (0, 3, 3), (0, 1, -1)):
        with pytest.raises(Exception) as want:
            t.narrow(*args)
        with pytest.raises(Exception) as got:
            b.narrow(*args)
        assert str(got.value).replace("Buffer", "tensor") == str(want.value), args
        # torch's IndexError stays one; its RuntimeErrors are ValueErrors (API.md: bad values).
        kind = IndexError if isinstance(want.value, IndexError) else ValueError
        assert isinstance(got.value, kind)
    with pytest.raises(ValueError, match="narrow\\(\\) cannot be applied to a 0-dim Buffer"):
        mpsrt.empty((), "float32").narrow(0, 0, 0)
    for bad in ("0", 1.0, None):
        with pytest.raises(TypeError):
            b.narrow(bad, 0, 1)
        with pytest.raises(TypeError):
            b.narrow(0, bad, 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        b.stride(2)
    assert b.stride() == (3, 1) and b.stride(-2) == 3 and b.is_contiguous()


def test_strided_view_fill_and_copy() -> None:
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    b = make(x)
    v = b.narrow(1, 2, 3)
    want = x.copy()
    assert v.fill_(-1) is v
    want[:, 2:5] = -1
    np.testing.assert_array_equal(b.numpy(), want)  # only the view's elements changed
    # From host data (element order), from a contiguous Buffer, from a strided view.
    v.copy_(np.arange(12, dtype=np.int32).reshape(4, 3) * 10)
    want[:, 2:5] = np.arange(12).reshape(4, 3) * 10
    np.testing.assert_array_equal(b.numpy(), want)
    c = mpsrt.empty((4, 3), "int32")
    c.copy_(v)  # into a contiguous Buffer
    np.testing.assert_array_equal(c.numpy(), want[:, 2:5])
    b.narrow(1, 0, 3).copy_(v)  # strided to strided, overlapping columns of one Buffer
    mpsrt.synchronize()
    want[:, 0:3] = want[:, 2:5].copy()
    np.testing.assert_array_equal(b.numpy(), want)
    with pytest.raises(ValueError, match="shapes and itemsizes must match"):
        v.copy_(mpsrt.empty((3, 4), "int32"))
    with pytest.raises(ValueError, match="shapes and itemsizes must match"):
        v.copy_(mpsrt.empty((4, 3), "int64"))
    with pytest.raises(ValueError, match="sizes must match"):
        v.copy_(np.zeros(5, np.int32))
    np.testing.assert_array_equal(b.numpy(), want)  # refused copies wrote nothing


def test_strided_view_numpy_and_dlpack() -> None:
    x = np.arange(42, dtype=np.float32).reshape(3, 7, 2)
    b = make(x)
    v = b.narrow(1, 3, 3)
    a = v.numpy()
    np.testing.assert_array_equal(a, x[:, 3:6])
    assert a.strides == tuple(4 * s for s in v.stride())
    copy = np.from_dlpack(v, copy=True)  # a host copy, both memory models
    np.testing.assert_array_equal(copy, x[:, 3:6])
    if unified():
        # numpy() and DLPack alias the memory with the view's strides.
        a[0, 0, 0] = -5
        assert b.numpy()[0, 3, 0] == -5
        t = torch.from_dlpack(v)
        assert t.stride() == v.stride() and t.data_ptr() == v.data_ptr
        np.testing.assert_array_equal(t.numpy(), a)
    else:
        assert v.__dlpack_device__()[0] != 1
        with pytest.raises(BufferError):
            v.__dlpack__(dl_device=(1, 0))


def test_strided_view_refuses_what_needs_contiguous() -> None:
    v = mpsrt.empty((4, 6), "float32").narrow(1, 1, 2)
    assert not v.is_contiguous()
    for call in (lambda: v.view(0), v._raw, v.uniform_, v.normal_, lambda: v.bernoulli_()):
        with pytest.raises(ValueError, match=r"strided view .* needs contiguous memory"):
            call()
    assert "strides=(6, 1)" in repr(v)
    # A contiguous view of a strided view is a plain Buffer again (one row of the column pair).
    assert v[0].is_contiguous() and v[0].shape == (2,)
    v[0].uniform_()
