"""Checks a wheel repaired by auditwheel (.ci/run, step "wheel: ..."); prints its summary.

    python .ci/wheel_check.py WHEELHOUSE/mpsrt-*.whl [--expect-glue=2.13,2.14,...]

- the file name and `auditwheel show` name a manylinux tag;
- the only libraries outside the manylinux policy are torch's own (libtorch*, libc10*,
  libshm*), which the prebuilt PyTorch glue links and torch provides at run time
  (`auditwheel repair --exclude`), and the extension modules need none of them;
- the wheel carries the two extension modules, mpsrt._C (the runtime) and mpsrt._bench (the
  bench's hooks, which reach mpsrt._C's runtime through a capsule), and neither has a DT_NEEDED
  on libvulkan (volk is compiled into mpsrt._C: the wheel imports where Vulkan is absent);
- with --expect-glue=VERSIONS, the wheel carries a prebuilt glue in mpsrt/torch/_prebuilt/ for
  each torch major.minor listed (glue-torch<major>.<minor>.so and its .json).
Linux only (readelf from binutils, auditwheel on PATH). Exits 1 with the reasons on failure.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import zipfile

TORCH_LIBS = ("libtorch*.so*", "libc10*.so*", "libshm*.so*")
EXTENSION_MODULES = ("_C", "_bench")


def needed(path: str) -> list[str]:
    """The DT_NEEDED entries of an ELF file."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return [ln.split("[", 1)[1].rstrip("]") for ln in out.stdout.splitlines() if "(NEEDED)" in ln]


def is_torch_lib(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in TORCH_LIBS)


def check(wheel: str, expect_glue: list[str]) -> list[str]:
    errors = []
    name = os.path.basename(wheel)
    if "manylinux" not in name:
        errors.append(f"the file name names no manylinux tag: {name}")
    show = subprocess.run(
        ["auditwheel", "show", "--json", wheel], capture_output=True, text=True, check=True
    )
    info = json.loads(show.stdout)
    external = sorted(info.get("external_libs") or {})
    print(f"wheel        {name} ({os.path.getsize(wheel) / 2**20:.2f} MiB)")
    print(f"symbols      allow {info['sym_tag']} (glibc / libstdc++ symbol versions)")
    print(f"outside      {', '.join(external) or 'none'} (torch provides these at run time)")
    if not str(info.get("sym_tag", "")).startswith("manylinux"):
        errors.append(f"auditwheel show: the symbol versions allow no manylinux tag: {info}")
    others = [lib for lib in external if not is_torch_lib(lib)]
    if others:
        errors.append(f"libraries outside the manylinux policy besides torch's: {others}")
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
        members = z.namelist()
        glues = [m for m in members if m.startswith("mpsrt/torch/_prebuilt/") and m[-1] != "/"]
        modules = []
        for name in EXTENSION_MODULES:
            found = [m for m in members if m.startswith(f"mpsrt/{name}.") and m.endswith(".so")]
            if len(found) != 1:
                errors.append(f"expected one extension module mpsrt/{name}*.so, found {found}")
            modules += found
        for m in modules:
            deps = needed(os.path.join(tmp, m))
            print(f"{m}  needs {', '.join(deps)}")
            bad = [d for d in deps if d.startswith("libvulkan") or is_torch_lib(d)]
            if bad:
                errors.append(f"{m} needs {bad} (volk is compiled in; torch is the glue's)")
        for g in glues:
            print(f"{g}  ({z.getinfo(g).file_size / 2**20:.2f} MiB)")
        for minor in expect_glue:
            for suffix in (".so", ".json"):
                name = f"mpsrt/torch/_prebuilt/glue-torch{minor}{suffix}"
                if name not in glues:
                    errors.append(f"no {name} in the wheel (--expect-glue)")
    return errors


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--expect-glue=")]
    expect = [a.split("=", 1)[1] for a in argv if a.startswith("--expect-glue=")]
    if len(args) != 1 or len(expect) > 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    errors = check(args[0], expect_glue=[v for v in "".join(expect).split(",") if v])
    for e in errors:
        print(f"FAIL: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
