"""``python -m mpsrt.torch.prebuild OUTDIR``: builds the torch glue for the installed torch into
OUTDIR as ``glue-torch<major>.<minor>.so`` with its metadata ``glue-torch<major>.<minor>.json``.

Copied into the package's ``mpsrt/torch/_prebuilt/`` (the wheel's build does this for each
torch minor version it supports), the glue loads at ``import mpsrt.torch`` (and with torch's
autoload) with no compiler. The build is the one ``import mpsrt.torch`` makes (same unity
source, same flags, the same cache under ``$TORCH_EXTENSIONS_DIR``): running this module imports
``mpsrt.torch``, which builds the glue or loads the finished cached build, and that library is
copied. Where the import loaded a prebuilt glue instead, this runs again in a child process that
ignores prebuilt glues, so that the output is always built against the installed torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def prebuild(outdir: Path) -> Path:
    """Writes the glue this process loaded (a build for the installed torch) with its metadata
    into `outdir`; returns the library's path."""
    from . import _glue

    if _glue.loaded_library is None or _glue.loaded_from == "prebuilt":
        raise RuntimeError("[torch] prebuild needs the glue built for this torch loaded")
    outdir.mkdir(parents=True, exist_ok=True)
    target = _glue.prebuilt_library(outdir)
    # Written beside and renamed over: a loader never sees half a library.
    partial = target.with_name(target.name + ".partial")
    shutil.copy(_glue.loaded_library, partial)
    partial.replace(target)
    meta = json.dumps(_glue.glue_metadata(), indent=2, sort_keys=True) + "\n"
    target.with_suffix(".json").write_text(meta)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mpsrt.torch.prebuild",
        description="Build mpsrt's PyTorch glue for the installed torch into OUTDIR "
        "(glue-torch<major>.<minor>.so and .json), for mpsrt/torch/_prebuilt/.",
    )
    parser.add_argument("outdir", type=Path, help="folder to write the glue into")
    args = parser.parse_args(argv)
    if args.outdir.exists() and not args.outdir.is_dir():
        parser.error(f"OUTDIR {args.outdir} exists and is not a folder")
    from . import _glue

    if _glue.loaded_from == "prebuilt":
        # A nonexistent folder of prebuilt glues: the child builds or loads the cached build.
        env = {**os.environ, _glue.GLUE_DIR_ENV: os.path.join(os.devnull, "none")}
        cmd = [sys.executable, "-m", "mpsrt.torch.prebuild", str(args.outdir)]
        return subprocess.run(cmd, env=env).returncode
    print(prebuild(args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
