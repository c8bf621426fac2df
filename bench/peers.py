"""Which peers each row of `python -m bench` is measured beside.

Rows are of two kinds:

- **device rows** time work on the device or its memory (fills, copies, random fills, dispatch
  latency, streams, the allocator handing out device memory, events, host<->device copies);
- **host-side rows** time host work only (Python call cost, allocator bookkeeping, binding
  overhead, profiler cost); they keep their CPU peers on every device.

Device rows are measured beside the device's own peers, found in this process: torch.cuda
(and CuPy) on an NVIDIA (or, with a ROCm build, AMD) device; torch.mps and MLX on an Apple GPU.
CPU peers (C memset/memcpy, numpy, torch on the CPU) appear on device rows only where the
device's memory is host memory (`DeviceProperties.unified_memory`): elsewhere they would read
device memory across the bus, or time host memory beside device memory. A device row that is
left without a peer shows mpsrt alone, with a note saying why.

`choose_peers(backend, properties, libraries)` makes that choice; it is a pure function of its
arguments, so that the choice for any device can be tested on any machine.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from .timing import Row, Stats, measure_interleaved

# Vulkan devices that are the CPU in disguise: not a GPU, whatever their memory model.
SOFTWARE_DEVICES = ("llvmpipe", "lavapipe", "swiftshader", "softpipe")
# Peer libraries in the order their rows appear; the first one found is the one that goals
# name ("torch.cuda" on NVIDIA, "torch.mps" on Apple).
CANDIDATES = {
    "nvidia": ("torch.cuda", "cupy"),
    "amd": ("torch.cuda", "cupy"),
    "apple": ("torch.mps", "mlx"),
}
GPU_TAG = "(gpu)"


@dataclass(frozen=True)
class Library:
    """A peer library as found in this process.

    `detail` is its version and device where it is available, else why it is not (e.g.
    "not available (torch built without CUDA)"); `vendors` are the GPU vendors it drives.
    """

    name: str
    available: bool
    detail: str
    vendors: tuple[str, ...] = ()


def vendor_of(backend: str, name: str, details: str = "") -> str:
    """ "nvidia", "amd", "apple", "intel", "software" (a CPU posing as a GPU), "host" (the cpu
    backend) or "other", from the backend and the device's name and details."""
    if backend == "cpu":
        return "host"
    if backend == "metal":
        return "apple"
    text = f"{name} {details}".lower()
    if any(s in text for s in SOFTWARE_DEVICES):
        return "software"
    for vendor, marks in (
        ("nvidia", ("nvidia", "geforce", "quadro", "tesla")),
        ("amd", ("amd", "radeon")),
        ("apple", ("apple",)),
        ("intel", ("intel",)),
    ):
        if any(m in text for m in marks):
            return vendor
    return "other"


@dataclass
class Peers:
    """The peers of one backend's device, chosen by `choose_peers`.

    - `unified`: Buffers are host memory (numpy() and DLPack alias them);
    - `gpu`: the device is a real GPU: goals tagged "(gpu)" are judged here (where a row has a
      peer, only against a real device peer);
    - `device_peers`: names of the device peer libraries, in row order;
    - `missing`: each candidate peer that is not used, and why.
    """

    backend: str
    device: str
    vendor: str
    unified: bool
    gpu: bool
    device_peers: tuple[str, ...] = ()
    missing: dict[str, str] = field(default_factory=dict)
    found: dict[str, str] = field(default_factory=dict)  # each device peer's version and device
    memory_bytes: int = 0  # the device's recommended working set, for sizing the big rows
    _instances: list[DevicePeer] | None = field(default=None, repr=False, compare=False)

    @property
    def cpu_peers(self) -> bool:
        """CPU peers may stand beside device rows: the device's memory is host memory."""
        return self.unified

    @property
    def device_style(self) -> bool:
        """Device rows are measured as on a GPU (device peers, both sides synchronized, no
        host view of device memory): where a device peer exists or the memory is not host
        memory. Elsewhere (cpu, lavapipe) the rows are those of the host-memory runtime."""
        return bool(self.device_peers) or not self.unified

    @property
    def memory(self) -> str:
        if self.unified:
            return "unified: Buffers are host memory (numpy() and DLPack alias them)"
        return "discrete: Buffers are not host memory (unified_memory=False)"

    def no_peer_note(self) -> str:
        """Why a device row shows mpsrt alone."""
        why = "; ".join(f"{k}: {v}" for k, v in self.missing.items()) or "none for this device"
        cpu = "" if self.unified else "; CPU peers do not touch device memory"
        return f"no device peer ({why}){cpu}"

    def describe(self) -> dict[str, str]:
        """Lines for the backend's header: memory model, device peers, what device rows are
        measured beside."""
        found = ", ".join(f"{n} ({self.found[n]})" if n in self.found else n
                          for n in self.device_peers) or "none"  # fmt: skip
        if self.backend == "cpu":
            found = "none (the cpu backend's device is the host)"
        missing = "; ".join(f"{k}: {v}" for k, v in self.missing.items())
        if self.device_peers and self.unified:
            rows = f"beside {', '.join(self.device_peers)} and the CPU peers"
        elif self.device_peers:
            rows = f"beside {', '.join(self.device_peers)} (no CPU peer: memory is not shared)"
        elif self.unified:
            rows = "beside CPU peers (C, numpy, torch cpu) on the same memory"
        else:
            rows = "mpsrt alone (no device peer; CPU peers do not touch device memory)"
        out = {"memory": self.memory, "device peers": found}
        if missing:
            out["not used"] = missing
        out["device rows"] = rows
        if self.backend != "cpu":
            out["gpu goals"] = "judged" if self.gpu else "shown, not judged (not a GPU)"
        return out

    def instances(self) -> list[DevicePeer]:
        """The device peers, started once (a peer that fails to start moves to `missing`)."""
        if self._instances is None:
            from . import gpu_peers

            started = []
            for name in self.device_peers:
                try:
                    started.append(gpu_peers.FACTORIES[name]())
                except Exception as e:
                    self.missing[name] = f"failed to start: {short_error(e)}"
                    self.found.pop(name, None)
            self._instances = started
            self.device_peers = tuple(n for n in self.device_peers if n in self.found)
        return self._instances

    def primary(self) -> DevicePeer | None:
        """The peer that goals name (the first one), if any started."""
        inst = self.instances()
        return inst[0] if inst else None

    def release(self) -> None:
        """Gives the peers' cached device memory back (between areas and big rows)."""
        for p in self._instances or ():
            try:
                p.release()
            except Exception:
                pass


def choose_peers(backend: str, properties: Any, libraries: Mapping[str, Library]) -> Peers:
    """The peers of a device: `properties` has the fields of `mpsrt.DeviceProperties` (name,
    unified_memory, details, recommended_max_memory), `libraries` the peer libraries found
    (`probe_libraries()`). Pure: the same arguments give the same choice on any machine."""
    name = str(getattr(properties, "name", ""))
    details = str(getattr(properties, "details", "") or "")
    unified = bool(getattr(properties, "unified_memory", True))
    vendor = vendor_of(backend, name, details)
    gpu = backend != "cpu" and vendor not in ("software", "host")
    found: dict[str, str] = {}
    missing: dict[str, str] = {}
    wanted = CANDIDATES.get(vendor, ())
    for lib in libraries.values():
        if lib.name in wanted and lib.available and vendor in lib.vendors:
            found[lib.name] = lib.detail
        elif backend == "cpu":
            continue  # the cpu backend's device is the host: its peers are CPU libraries
        elif not lib.available:
            missing[lib.name] = lib.detail
        elif vendor not in lib.vendors:
            missing[lib.name] = f"not this device's peer ({name or backend} is not {_drives(lib)})"
        else:
            missing[lib.name] = f"not a peer on {vendor} devices"
    return Peers(
        backend=backend,
        device=name,
        vendor=vendor,
        unified=unified,
        gpu=gpu,
        device_peers=tuple(sorted(found, key=wanted.index)),
        missing=missing,
        found=found,
        memory_bytes=int(getattr(properties, "recommended_max_memory", 0) or 0),
    )


def _drives(lib: Library) -> str:
    names = {"nvidia": "NVIDIA's", "amd": "AMD's", "apple": "Apple's"}
    return (
        " or ".join(f"{names.get(v, v)}" for v in lib.vendors) + " GPU" if lib.vendors else "a GPU"
    )


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:120]}" if text else type(e).__name__


def _probe_torch() -> list[Library]:
    try:
        import torch
    except ImportError:
        return [Library("torch.cuda", False, "not available (torch not installed)")]
    except Exception as e:
        return [Library("torch.cuda", False, f"not available (import torch: {short_error(e)})")]
    out = []
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    vendors = ("amd",) if hip else ("nvidia",)
    if not cuda and not hip:
        out.append(Library("torch.cuda", False, "not available (torch built without CUDA)"))
    else:
        try:
            ok = torch.cuda.is_available()
            count = torch.cuda.device_count() if ok else 0
        except Exception as e:
            ok, count, why = False, 0, short_error(e)
        else:
            why = "no device or driver found"
        if ok and count:
            build = f"ROCm {hip}" if hip else f"CUDA {cuda}"
            dev = torch.cuda.get_device_name(0)
            out.append(Library("torch.cuda", True, f"torch {torch.__version__}, {build}, {dev}",
                               vendors))  # fmt: skip
        else:
            out.append(Library("torch.cuda", False, f"not available ({why})", vendors))
    if sys.platform == "darwin":
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            out.append(Library("torch.mps", True, f"torch {torch.__version__}", ("apple",)))
        else:
            out.append(
                Library("torch.mps", False, "not available (torch.backends.mps)", ("apple",))
            )
    return out


def _probe_cupy() -> Library:
    try:
        import cupy
    except ImportError:
        return Library("cupy", False, "not installed")
    except Exception as e:
        return Library("cupy", False, f"import failed ({short_error(e)})")
    try:
        hip = bool(getattr(cupy.cuda.runtime, "is_hip", False))
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return Library("cupy", False, f"not available ({short_error(e)})")
    vendors = ("amd",) if hip else ("nvidia",)
    if not count:
        return Library("cupy", False, "not available (no device)", vendors)
    return Library("cupy", True, f"cupy {cupy.__version__}", vendors)


def _probe_mlx() -> Library:
    try:
        import mlx.core as mx
    except ImportError:
        return Library("mlx", False, "not installed", ("apple",))
    except Exception as e:
        return Library("mlx", False, f"import failed ({short_error(e)})", ("apple",))
    metal = getattr(mx, "metal", None)
    if metal is None or not metal.is_available():
        return Library(
            "mlx", False, "not available (no Metal GPU: MLX runs on the CPU)", ("apple",)
        )
    return Library("mlx", True, f"mlx {getattr(mx, '__version__', '?')}, GPU stream", ("apple",))


def probe_libraries() -> dict[str, Library]:
    """The device peer libraries of this process: torch.cuda and CuPy everywhere, torch.mps and
    MLX on macOS. Importing them is the only side effect (no device memory is allocated)."""
    libs = [*_probe_torch(), _probe_cupy()]
    if sys.platform == "darwin":
        libs.append(_probe_mlx())
    return {lib.name: lib for lib in libs}


def current(backend: str) -> Peers:
    """The peers of the current runtime's device 0 (the runtime is on `backend`)."""
    import mpsrt

    return choose_peers(backend, mpsrt.get_device_properties(), probe_libraries())


# ------------------------------------------------------------------ goals


def cpu_goals(rows: Sequence[Row], backend: str) -> None:
    """Goals set for the cpu backend: shown with "(cpu)" but not judged on other backends."""
    if backend == "cpu":
        return
    for r in rows:
        if r.goal and not r.goal.endswith((" (cpu)", f" {GPU_TAG}")):
            r.goal, r.goal_met = f"{r.goal} (cpu)", None


def gpu_goal(row: Row, text: str, met: bool | None, peers: Peers, real_peer: bool = True) -> None:
    """A goal set for a GPU: shown with "(gpu)", judged only on a real GPU and, where the row
    has a peer, only when that peer is a real device peer (torch.cuda, not a stand-in)."""
    row.goal = f"{text} {GPU_TAG}"
    row.goal_met = met if (peers.gpu and real_peer and met is not None) else None


# ------------------------------------------------------------------ device rows


@dataclass
class Goal:
    """A goal against the primary device peer: `text` may name it as {peer}; met when the row's
    ratio (> 1 better for mpsrt) is at least `min_ratio`."""

    text: str
    min_ratio: float


def _usable(peer: DevicePeer, make: Callable[[DevicePeer], Callable[[], object] | None]):
    """(fn, why-not): the peer's function for this row, tried once (with its sync)."""
    try:
        fn = make(peer)
        if fn is None:
            return None, "no such operation"
        fn()
        peer.sync()
        return fn, ""
    except Exception as e:
        return None, short_error(e)


def versus(
    peers: Peers,
    area: str,
    case: str,
    ours: Callable[[], object],
    make: Callable[[DevicePeer], Callable[[], object] | None],
    *,
    unit: str,
    nbytes: int = 0,
    number: int = 1,
    sync: bool = True,
    stats: Sequence[str] = ("median",),
    goal: Goal | None = None,
    note: str = "",
    timing: Mapping[str, Any] | None = None,
) -> list[Row]:
    """A device row: mpsrt's `ours()` beside each device peer's `make(peer)()`, timed in
    alternating turns (bench.timing), `number` calls per sample; with `sync`, each sample ends
    with a synchronize of its own device (mpsrt.synchronize, torch.cuda.synchronize, ...).

    Gives one row per peer and statistic (GB/s of `nbytes` per call where `nbytes`, else the
    time in `unit`), or mpsrt alone with the reason where no device peer can run the case.
    The goal applies to the primary peer's rows (the first statistic's)."""
    import mpsrt

    fns: dict[str, Callable[[], object]] = {"mpsrt": ours}
    syncs: dict[str, Callable[[], object]] = {"mpsrt": mpsrt.synchronize}
    real: dict[str, bool] = {}
    why: list[str] = []
    for peer in peers.instances():
        fn, reason = _usable(peer, make)
        if fn is None:
            why.append(f"{peer.name}: {reason}")
            continue
        fns[peer.name], syncs[peer.name], real[peer.name] = fn, peer.sync, peer.real
    kwargs = dict(timing or {})
    measured = measure_interleaved(fns, syncs=syncs if sync else None, number=number, **kwargs)
    del fns

    def value(st: Stats, stat: str) -> float:
        sec = getattr(st, stat)
        if nbytes:
            return nbytes / sec / 1e9
        return sec * {"s": 1.0, "ms": 1e3, "µs": 1e6, "ns": 1e9}[unit]

    mine = measured.pop("mpsrt")
    first = peers.primary()
    primary = first.name if first is not None else None
    rows: list[Row] = []
    for stat in stats:
        name = case if len(stats) == 1 else f"{case}, {stat}"
        if not measured:
            row = Row(area, name, value(mine, stat), unit)
            parts = [note, peers.no_peer_note() if not peers.instances() else "; ".join(why)]
            row.note = "; ".join(p for p in parts if p)
            if goal is not None and stat == stats[0]:
                gpu_goal(row, goal.text.format(peer=goal_peer(peers)), None, peers)
            rows.append(row)
            continue
        for who, st in measured.items():
            row = Row(area, name, value(mine, stat), unit, who, value(st, stat))
            if goal is not None and who == primary and stat == stats[0]:
                met = row.ratio is not None and row.ratio >= goal.min_ratio
                gpu_goal(row, goal.text.format(peer=who), met, peers, real[who])
            rows.append(row)
    if measured and (note or why):
        rows[0].note = "; ".join(p for p in (note, *why) if p)
    return rows


def goal_peer(peers: Peers) -> str:
    """The peer a goal names where no peer ran: the vendor's usual one."""
    return {"apple": "torch.mps"}.get(peers.vendor, "torch.cuda")


def big_size(peers: Peers, quick: bool, full: int = 1 << 30, copies: int = 2) -> tuple[int, str]:
    """The size of a "1 GiB" row: `full`, or smaller in --quick (256 MiB) or where the device
    (or a peer's device) has less than 4 x `copies` x `full` free; and a note when sized down."""
    size, why = full, ""
    if quick:
        size, why = min(full, 256 << 20), "--quick"
    free = [peers.memory_bytes] if peers.memory_bytes else []
    for p in peers.instances():
        try:
            f = p.free_bytes()
        except Exception:
            f = None
        if f:
            free.append(f)
    while free and size > (64 << 20) and 4 * copies * size > min(free):
        size //= 2
        why = f"{min(free) / 2**30:.1f} GiB of device memory free"
    note = f"sized down from {_size_name(full)} ({why})" if size != full else ""
    return size, note


def _size_name(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


class DevicePeer:
    """What a device peer offers the areas: each method returns a zero-argument function that
    runs one operation (queued on the device, not waited for), or None where the library has
    no such operation. Resources are made when the method is called and live as long as the
    returned function. `sync()` waits for the device."""

    name = "peer"
    real = True  # a GPU library (goals are judged against it); False for a stand-in

    def sync(self) -> None:
        raise NotImplementedError

    def fill(self, nbytes: int, dtype: str, value: float) -> Callable[[], object] | None:
        return None

    def copy(self, nbytes: int) -> Callable[[], object] | None:
        return None

    def random(self, kind: str, dtype: str, nbytes: int) -> Callable[[], object] | None:
        return None

    def empty(self, nbytes: int) -> Callable[[], object] | None:
        return None

    def tiny_op_sync(self) -> Callable[[], object] | None:
        """A 1-element op followed by a synchronize of the device."""
        return None

    def event(self) -> Callable[[], object] | None:
        """An event's record + query."""
        return None

    def host_to_device(self, host: Any) -> Callable[[], object] | None:
        """A copy of the (pageable) numpy array `host` into device memory."""
        return None

    def device_to_host(self, nbytes: int) -> Callable[[], object] | None:
        """A copy of nbytes of device memory into new host memory."""
        return None

    def streams(self, nbytes: int, count: int, batch: int) -> Callable[[], object] | None:
        """`batch` byte fills of nbytes on each of `count` streams, then a synchronize."""
        return None

    def release(self) -> None:
        pass

    def free_bytes(self) -> int | None:
        return None
