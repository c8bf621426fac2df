"""python -m bench: mpsrt against its peers (C, numpy, torch), one table per area.

Misses of a goal are reported, not failures: the exit code is 0 unless the arguments are bad.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict

from .timing import Row, format_table, progress, progress_clear

AREAS = ("memory", "fill_copy", "random", "dispatch", "streams", "binding", "profiler")


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
    p.add_argument("--backend", metavar="NAME", help="sets MPSRT_BACKEND before mpsrt loads")
    return p, p.parse_args(argv)


def _header() -> dict[str, object]:
    import mpsrt
    import numpy

    props = mpsrt.get_device_properties()
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    options = mpsrt.options()
    changed = {o["name"]: o["value"] for o in options if o["value"] not in ("", o["default"])}
    return {
        "mpsrt": mpsrt.__version__,
        "backend": mpsrt.backend(),
        "device": props.name,
        "details": props.details,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": torch_version,
        "cpus": f"{os.cpu_count()} ({usable} usable)",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)",
        "options": ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults",
        "mode": "quick",  # overwritten by main()
    }


def main(argv: list[str] | None = None) -> int:
    parser, args = _parse(argv)
    areas = list(AREAS)
    if args.only:
        areas = [a.strip() for item in args.only for a in item.split(",") if a.strip()]
        unknown = [a for a in areas if a not in AREAS]
        if unknown:
            parser.error(f"unknown area {', '.join(unknown)}; expected one of {', '.join(AREAS)}")
    if args.backend:
        os.environ["MPSRT_BACKEND"] = args.backend
    import mpsrt  # after MPSRT_BACKEND is set: the backend is chosen once per process

    if args.backend and args.backend not in mpsrt.available_backends():
        parser.error(
            f"backend {args.backend!r} is not available; "
            f"available: {', '.join(mpsrt.available_backends())}"
        )

    header = _header()
    header["mode"] = "quick" if args.quick else "full"
    width = max(len(k) for k in header)
    for key, value in header.items():
        print(f"{key.ljust(width)}  {value}")
    if os.getloadavg()[0] > 0.5:
        print("warning: the machine is busy with other work; expect noisy numbers")
    sys.stdout.flush()

    all_rows: list[Row] = []
    t_start = time.perf_counter()
    for area in areas:
        progress(f"[{area}] starting")
        t0 = time.perf_counter()
        rows = importlib.import_module(f".bench_{area}", __package__).run(args.quick)
        progress_clear()
        print(f"\n{format_table(area, rows)}\n({time.perf_counter() - t0:.1f} s)")
        sys.stdout.flush()
        all_rows += rows
    total = time.perf_counter() - t_start
    missed = [
        f"{r.area}/{r.name} vs {r.peer_name or r.goal}" for r in all_rows if r.goal_met is False
    ]
    print(f"\ntotal {total:.1f} s; goals missed: {len(missed)}")
    for m in missed:
        print(f"  MISS {m}")

    if args.json:
        header["seconds"] = round(total, 2)
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": [asdict(r) for r in all_rows]}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
