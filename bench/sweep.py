"""python -m bench.sweep: the vulkan backend's settings measured side by side, in one call.

Each variant is one `python -m bench` run in a subprocess (settings are read once per process)
with its MPSRT_VULKAN_* variables, over the areas the settings act on: the kernel settings over
`fill_copy` and `random`, the queue settings over `dispatch` and `streams`. Every variant
changes one setting from the defaults, so a row's best value names the setting to change. The
table shows mpsrt's value per variant (and the device peer's, where the run had one); --json
keeps every run's rows.

    python -m bench.sweep                       # every variant, --quick runs
    python -m bench.sweep --variants default,vector4,copy-dma
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL_AREAS = "fill_copy,random"
QUEUE_AREAS = "dispatch,streams"

# name: (settings, areas). One setting away from the defaults each.
VARIANTS: dict[str, tuple[dict[str, str], str]] = {
    "default": ({}, f"{KERNEL_AREAS},{QUEUE_AREAS}"),
    "vector4": ({"MPSRT_VULKAN_VECTOR": "4"}, KERNEL_AREAS),
    "copy-dma": ({"MPSRT_VULKAN_COPY": "dma"}, "fill_copy"),
    "wg128": ({"MPSRT_VULKAN_WORKGROUP": "128"}, KERNEL_AREAS),
    "wg512": ({"MPSRT_VULKAN_WORKGROUP": "512"}, KERNEL_AREAS),
    "wg1024": ({"MPSRT_VULKAN_WORKGROUP": "1024"}, KERNEL_AREAS),
    "groups1": ({"MPSRT_VULKAN_GROUPS_PER_SM": "1"}, KERNEL_AREAS),
    "groups2": ({"MPSRT_VULKAN_GROUPS_PER_SM": "2"}, KERNEL_AREAS),
    "groups4": ({"MPSRT_VULKAN_GROUPS_PER_SM": "4"}, KERNEL_AREAS),
    "groups16": ({"MPSRT_VULKAN_GROUPS_PER_SM": "16"}, KERNEL_AREAS),
    "groups32": ({"MPSRT_VULKAN_GROUPS_PER_SM": "32"}, KERNEL_AREAS),
    "unroll1": ({"MPSRT_VULKAN_UNROLL": "1"}, KERNEL_AREAS),
    "unroll4": ({"MPSRT_VULKAN_UNROLL": "4"}, KERNEL_AREAS),
    "unroll8": ({"MPSRT_VULKAN_UNROLL": "8"}, KERNEL_AREAS),
    "queues-shared": ({"MPSRT_VULKAN_QUEUES": "shared"}, QUEUE_AREAS),
    "spin0": ({"MPSRT_VULKAN_SPIN_US": "0"}, QUEUE_AREAS),
    "spin100": ({"MPSRT_VULKAN_SPIN_US": "100"}, QUEUE_AREAS),
}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="vulkan", help="backend to run on (default: vulkan)")
    p.add_argument(
        "--variants",
        help=f"comma-separated subset of: {', '.join(VARIANTS)} (default: all)",
    )
    p.add_argument("--full", action="store_true", help="full runs instead of --quick")
    p.add_argument("--json", metavar="PATH", help="write every variant's rows as JSON")
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one variant may take (default 300)"
    )
    return p.parse_args(argv)


def _run(name: str, env_add: dict[str, str], areas: str, args: argparse.Namespace) -> dict:
    """One variant's `python -m bench` run: its JSON, or {"error": why}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [sys.executable, "-m", "bench", "--backend", args.backend, "--only", areas]
        cmd += ["--json", str(out)] + ([] if args.full else ["--quick"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("MPSRT_VULKAN_")}
        env.update(env_add)
        root = Path(__file__).resolve().parent.parent
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                cmd, env=env, cwd=root, capture_output=True, text=True, timeout=args.timeout
            )
        except subprocess.TimeoutExpired:
            return {"error": f"ran past {args.timeout:g} s"}
        seconds = time.perf_counter() - t0
        if not out.exists():
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
        result = json.loads(out.read_text())
        result["seconds"] = round(seconds, 1)
        return result


def _key(row: dict) -> tuple[str, str]:
    return row["area"], row["name"]


def table(results: dict[str, dict]) -> str:
    """One line per row that has a value: mpsrt's value per variant, the best one marked."""
    names = list(results)
    order: list[tuple[str, str]] = []
    values: dict[tuple[str, str], dict[str, tuple[float, str, bool]]] = {}
    peers: dict[tuple[str, str], str] = {}
    for name, res in results.items():
        for row in res.get("rows", []):
            if row.get("value") is None:
                continue
            k = _key(row)
            if k not in values:
                order.append(k)
                values[k] = {}
            # Higher is better for rates; lower for times.
            higher = row["unit"] in ("GB/s", "x") and not row["name"].startswith("mixed-size")
            values[k].setdefault(name, (row["value"], row["unit"], higher))
            if row.get("peer_value") is not None and row.get("peer_name"):
                peers.setdefault(k, f"{row['peer_name']} {row['peer_value']:.3g}")
    lines = []
    head = ["area / case", *names, "peer"]
    rows = []
    for k in order:
        cells = values[k]
        higher = next(iter(cells.values()))[2]
        best = (max if higher else min)(cells, key=lambda n: cells[n][0])
        row = [f"{k[0]}: {k[1]}"]
        for n in names:
            if n not in cells:
                row.append("")
            else:
                v, unit, _ = cells[n]
                row.append(f"{v:.3g} {unit}" + (" *" if n == best and len(cells) > 1 else ""))
        row.append(peers.get(k, ""))
        rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    chosen = list(VARIANTS) if not args.variants else args.variants.split(",")
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        print(f"unknown variant(s) {', '.join(unknown)}; expected: {', '.join(VARIANTS)}")
        return 2
    results: dict[str, dict] = {}
    for name in chosen:
        settings, areas = VARIANTS[name]
        shown = " ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
        print(f"[sweep] {name}: {shown} ({areas})", flush=True)
        results[name] = _run(name, settings, areas, args)
        res = results[name]
        print(f"[sweep] {name}: " + (res["error"] if "error" in res else f"{res['seconds']} s"))
    print()
    print(table(results))
    failed = [n for n, r in results.items() if "error" in r]
    for n in failed:
        print(f"  NOT RUN {n}: {results[n]['error']}")
    print("* best value of the row (highest rate, lowest time)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"variants": {n: VARIANTS[n][0] for n in chosen}, "runs": results}, f)
            f.write("\n")
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
