"""Measurements that need their own process (options are read once per process).

Usage: python -m bench._worker dispatch_hot ITERS [CPU]
prints {"samples_ns": [...], "options": {...}} as JSON; with CPU, the process and every thread
it starts are pinned to that one CPU first.
       python -m bench._worker random_gbs KIND DTYPE NBYTES REPEATS
prints {"gbs": ...}: one random fill's bandwidth under this process's MPSRT_* settings.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "random_gbs":
        from .bench_random import fill_gbs

        print(json.dumps({"gbs": fill_gbs(argv[1], argv[2], int(argv[3]), int(argv[4]))}))
        return 0
    if len(argv) not in (2, 3) or argv[0] != "dispatch_hot":
        print("usage: python -m bench._worker dispatch_hot ITERS [CPU]", file=sys.stderr)
        return 2
    if len(argv) == 3:
        os.sched_setaffinity(0, {int(argv[2])})  # before mpsrt starts its threads
    import mpsrt

    from .bench_dispatch import hot_samples_ns

    samples = hot_samples_ns(int(argv[1]))
    options = {o["name"]: o["value"] for o in mpsrt.options()}
    print(json.dumps({"samples_ns": samples, "options": options}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
