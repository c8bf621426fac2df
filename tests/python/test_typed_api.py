"""The public API used with its static types: these tests run on every backend, and
test_stubs.py checks this file with mypy --strict against the installed stubs, so a stub that
loses a parameter's or a result's type (or a method) fails there."""

from __future__ import annotations

import mpsrt
import numpy as np
import numpy.typing as npt


def test_buffers_and_views() -> None:
    buf: mpsrt.Buffer = mpsrt.empty((4, 8), dtype="float32")
    shape: tuple[int, ...] = buf.shape
    assert shape == (4, 8) and buf.dtype == "float32" and buf.nbytes == 128
    row: mpsrt.Buffer = buf[1]
    rows: mpsrt.Buffer = buf[1:3]
    assert row.shape == (8,) and rows.shape == (2, 8)
    base: mpsrt.Buffer | None = rows.base
    assert base is buf
    filled: mpsrt.Buffer = buf.fill_(2.5)
    assert filled is buf
    as_int: mpsrt.Buffer = buf.view(0, (32,), "int32")
    assert as_int.shape == (32,) and as_int.base is buf
    copied: mpsrt.Buffer = mpsrt.empty(32, dtype="int32").copy_(as_int)
    device_type, index = copied.__dlpack_device__()
    unified: bool = mpsrt.get_device_properties().unified_memory
    assert (device_type, index) == ((1, 0) if unified else (7, copied.device))
    host: npt.NDArray[np.float32] = buf.numpy()  # the memory (unified) or a copy (discrete)
    assert host.sum() == 2.5 * 32


def test_random_fills_and_generators() -> None:
    gen = mpsrt.Generator()
    same: mpsrt.Generator = gen.manual_seed(7)
    assert same is gen and gen.initial_seed() == 7
    x: mpsrt.Buffer = mpsrt.empty(1000, dtype="float32").uniform_(-1.0, 1.0, generator=gen)
    offset: int = gen.get_offset()
    assert offset > 0
    twin: mpsrt.Generator = gen.clone_state()
    state: npt.NDArray[np.uint8] = gen.get_state()
    y: mpsrt.Buffer = mpsrt.empty(1000, dtype="float32").normal_(0.0, 2.0, generator=gen)
    z: mpsrt.Buffer = mpsrt.empty(1000, dtype="float32").normal_(0.0, 2.0, generator=twin)
    gen.set_state(state)
    w: mpsrt.Buffer = mpsrt.empty(1000, dtype="float32").normal_(0.0, 2.0, generator=gen)
    ints: mpsrt.Buffer = mpsrt.empty(100, dtype="int64").random_(0, 10)
    coins: mpsrt.Buffer = mpsrt.empty(100, dtype="float32").bernoulli_(0.25)
    assert x.shape == (1000,) and ints.shape == (100,) and coins.dtype == "float32"
    if mpsrt.get_device_properties().unified_memory:
        assert np.array_equal(y.numpy(), z.numpy()) and np.array_equal(y.numpy(), w.numpy())
        assert ((ints.numpy() >= 0) & (ints.numpy() < 10)).all()


def test_streams_and_events() -> None:
    stream = mpsrt.Stream(priority=-1)
    least, greatest = mpsrt.Stream.priority_range()
    assert greatest <= stream.priority <= least
    start = mpsrt.Event(enable_timing=True)
    with stream as entered:
        same: mpsrt.Stream = entered
        assert same == stream and mpsrt.current_stream() == stream
        start.record()
        buf = mpsrt.empty(1 << 16, dtype="uint8").fill_(1)
        end: mpsrt.Event = stream.record_event(mpsrt.Event(enable_timing=True))
    done: list[bool] = []
    stream.add_callback(lambda: done.append(True))
    other = mpsrt.Stream()
    other.wait_stream(stream)
    other.wait_event(end)
    buf.record_stream(other)
    other.synchronize()
    elapsed: float = start.elapsed_time(end)
    device: int | None = end.device
    assert elapsed >= 0.0 and device == stream.device and done == [True]


def test_memory_statistics() -> None:
    free, total = mpsrt.mem_get_info()
    stats: dict[str, int] = mpsrt.memory_stats()
    buf = mpsrt.empty(1 << 20)
    assert 0 <= free <= total and mpsrt.memory_allocated() >= buf.nbytes
    assert stats["allocated_bytes.all.current"] >= 0
