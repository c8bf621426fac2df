"""python -m bench: mpsrt against its peers, one table per area and backend.

Device rows stand beside the device's own peers (torch.cuda and CuPy on NVIDIA, torch.mps and
MLX on Apple) and beside CPU peers (C, numpy, torch cpu) only where the device's memory is host
memory; host-side rows keep their CPU peers (bench/peers.py).

Misses of a goal are reported, not failures: the exit code is 0 unless the arguments are bad
(2), an area failed or was stopped by its time guard (3) or the plot could not be written (1).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import importlib
import inspect
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict

from .peers import Peers, current, short_error
from .plot import check_path, plot
from .timing import Row, format_table, progress, progress_clear

AREAS = ("memory", "fill_copy", "random", "dispatch", "streams", "binding", "profiler", "torch")
# Every area runs once per backend: the runtime is re-created on each (mpsrt._C._reset_runtime).


def _parse(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument(
        "--only",
        action="append",
        metavar="AREA",
        help=f"run only these areas (repeatable or comma-separated): {', '.join(AREAS)}",
    )
    p.add_argument("--quick", action="store_true", help="fewer sizes and samples (< 60 s)")
    p.add_argument("--json", metavar="PATH", help="also write the header and all rows as JSON")
    p.add_argument(
        "--backend", metavar="NAME", help="run on this backend only (default: every available one)"
    )
    p.add_argument(
        "--plot",
        metavar="PATH.png",
        help="also draw the results: a panel per area and backend (needs matplotlib)",
    )
    p.add_argument(
        "--area-timeout",
        type=float,
        metavar="SECONDS",
        help="stop an area that runs longer and report it (default: 60 with --quick, else 600; "
        "0: no limit)",
    )
    args = p.parse_args(argv)
    args.areas = list(AREAS)
    if args.only:
        args.areas = [a.strip() for item in args.only for a in item.split(",") if a.strip()]
        unknown = [a for a in args.areas if a not in AREAS]
        if unknown:
            p.error(f"unknown area {', '.join(unknown)}; expected one of {', '.join(AREAS)}")
    if args.plot:
        try:  # before the run, so that a bad path or a missing matplotlib does not cost one
            check_path(args.plot)
        except (ImportError, ValueError) as e:
            p.error(str(e))
    return p, args


class AreaTimeout(BaseException):
    """An area ran past --area-timeout (a BaseException, like KeyboardInterrupt, so that the
    areas' `except Exception` around a peer's call does not swallow it)."""


@contextlib.contextmanager
def _time_guard(seconds: float) -> Iterator[None]:
    """Raises AreaTimeout in the block after `seconds` (SIGALRM: at the next Python bytecode,
    so a native call that blocks is interrupted when it returns). As a last resort against a
    native call that never returns, the process dumps its threads' stacks and exits 30 s later.
    """
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise AreaTimeout(f"stopped after {seconds:g} s (--area-timeout)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    backstop = False
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:  # needs a real file (not one that pytest or a notebook put in sys.stderr's place)
            faulthandler.dump_traceback_later(seconds + 30, exit=True, file=sys.__stderr__)
            backstop = True
        except (AttributeError, ValueError, OSError):
            pass
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if backstop:
            faulthandler.cancel_dump_traceback_later()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except ImportError:
        return "not installed"


def _header(backends: list[str]) -> dict[str, object]:
    import mpsrt
    import numpy

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    options = mpsrt.options()
    changed = {o["name"]: o["value"] for o in options if o["value"] not in ("", o["default"])}
    return {
        "mpsrt": mpsrt.__version__,
        "backends": ", ".join(backends),
        "default backend": mpsrt.backend_info()["reason"],
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": _version("torch"),
        "mlx": _version("mlx.core"),
        "cpus": f"{os.cpu_count()} ({usable} usable)",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)",
        "options": ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults",
        "mode": "quick",  # overwritten by main()
    }


def _use_backend(name: str) -> tuple[dict[str, object], Peers]:
    """Re-creates the runtime on `name` (subprocess workers inherit MPSRT_BACKEND too),
    describes its device and chooses the peers of its device rows."""
    import mpsrt

    gc.collect()  # Buffers of the previous backend's areas
    os.environ["MPSRT_BACKEND"] = name
    mpsrt._C._reset_runtime(dict(os.environ))
    props = mpsrt.get_device_properties()
    peers = current(name)
    peers.instances()  # started here, so that the header says which ones work
    device = {"backend": name, "device": props.name, "details": props.details or "-"}
    device.update({k.replace(" ", "_"): v for k, v in peers.describe().items()})
    device["device_peer_names"] = list(peers.device_peers)
    return device, peers


def _run_area(
    area: str, backend: str, peers: Peers, quick: bool, limit: float
) -> tuple[list[Row], str | None]:
    """The area's rows, or one row that says why it stopped (and that reason)."""
    run = importlib.import_module(f".bench_{area}", __package__).run
    params = inspect.signature(run).parameters
    kwargs: dict[str, object] = {}
    if "backend" in params:
        kwargs["backend"] = backend
    if "peers" in params:
        kwargs["peers"] = peers
    try:
        with _time_guard(limit):
            rows = run(quick, **kwargs)
    except AreaTimeout as e:
        failure = str(e)
    except Exception as e:
        traceback.print_exc()
        failure = f"failed: {short_error(e)}"
    else:
        if "backend" not in params and backend != "cpu":
            for r in rows:  # this area's goals were set for the cpu backend
                if r.goal:
                    r.goal, r.goal_met = f"{r.goal} (cpu)", None
        return rows, None
    gc.collect()  # what the stopped area left (its Buffers) before the next one
    try:
        import mpsrt

        mpsrt.synchronize()
    except Exception:
        pass
    return [Row(area, f"{area}: not finished", None, "", note=failure)], failure


def main(argv: list[str] | None = None) -> int:
    parser, args = _parse(argv)
    areas = args.areas
    if args.backend:
        os.environ["MPSRT_BACKEND"] = args.backend
    import mpsrt  # after MPSRT_BACKEND is set: the backend is chosen once per process

    if args.backend and args.backend not in mpsrt.available_backends():
        parser.error(
            f"backend {args.backend!r} is not available; "
            f"available: {', '.join(mpsrt.available_backends())}"
        )

    backends = [args.backend] if args.backend else mpsrt.available_backends()
    header = _header(backends)
    header["mode"] = "quick" if args.quick else "full"
    width = max(len(k) for k in header)
    for key, value in header.items():
        print(f"{key.ljust(width)}  {value}")
    if os.getloadavg()[0] > 0.5:
        print("warning: the machine is busy with other work; expect noisy numbers")
    sys.stdout.flush()

    limit = args.area_timeout
    if limit is None:
        limit = 60.0 if args.quick else 600.0
    all_rows: list[Row] = []
    devices = []
    failures: list[str] = []
    t_start = time.perf_counter()
    for backend in backends:
        device, peers = _use_backend(backend)
        devices.append(device)
        print(f"\n#### backend {backend}: {device['device']} ({device['details']})")
        described = peers.describe()
        width = max(len(k) for k in described)
        for key, value in described.items():
            print(f"{key.ljust(width)}  {value}")
        for area in areas:
            progress(f"[{backend}/{area}] starting")
            t0 = time.perf_counter()
            rows, failure = _run_area(area, backend, peers, args.quick, limit)
            if failure:
                failures.append(f"{backend}/{area}: {failure}")
            peers.release()
            for r in rows:
                r.backend = backend
            progress_clear()
            title = f"{area} ({backend})"
            print(f"\n{format_table(title, rows)}\n({time.perf_counter() - t0:.1f} s)")
            sys.stdout.flush()
            all_rows += rows
    total = time.perf_counter() - t_start
    missed = [
        f"{r.backend}/{r.area}/{r.name} vs {r.peer_name or r.goal}"
        for r in all_rows
        if r.goal_met is False
    ]
    print(f"\ntotal {total:.1f} s; goals missed: {len(missed)}")
    for m in missed:
        print(f"  MISS {m}")
    for f in failures:
        print(f"  NOT FINISHED {f}")

    if args.json:
        header["seconds"] = round(total, 2)
        header["devices"] = devices
        header["not_finished"] = failures
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": [asdict(r) for r in all_rows]}, f, indent=1)
            f.write("\n")
    if args.plot:
        title = f"python -m bench ({header['mode']}): mpsrt {header['mpsrt']} on {header['cpu']}"
        try:
            plot(all_rows, args.plot, title)
        except (OSError, ValueError) as e:
            print(f"plot failed: {e}", file=sys.stderr)
            return 3 if failures else 1
        print(f"plot: {args.plot}")
    return 3 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
