"""Environment options: one table, read once, validated, documented, PYTORCH_MPS_* aliases."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import mpsrt
import pytest
from conftest import reset_runtime, run_python

# The environment table of the docs is generated from mpsrt.options() by the docs build
# (docs/_ext/mpsrt_tables.py, the `{mpsrt-options}` directive on docs/environment.md).
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def _tables_ext():
    path = DOCS / "_ext" / "generated_tables.py"
    spec = importlib.util.spec_from_file_location("generated_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_option_is_listed_and_documented() -> None:
    opts = {o["name"]: o for o in mpsrt.options()}
    api_names = {
        "MPSRT_BACKEND",
        "MPSRT_HIGH_WATERMARK_RATIO",
        "MPSRT_LOW_WATERMARK_RATIO",
        "MPSRT_DEBUG_ALLOCATOR",
        "MPSRT_CPU_DEVICES",
        "MPSRT_TRACE_SIGNPOSTS",
        "MPSRT_LOG_PROFILE_INFO",
    }
    assert api_names <= set(opts)
    assert opts["MPSRT_HIGH_WATERMARK_RATIO"]["alias"] == "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
    assert opts["MPSRT_DEBUG_ALLOCATOR"]["alias"] == "PYTORCH_DEBUG_MPS_ALLOCATOR"
    for name, o in opts.items():
        assert len(o["help"]) > 40, f"{name}'s help text says too little to document it"
    # The docs page takes its table from the options table, not from a hand-kept copy.
    page = (DOCS / "environment.md").read_text()
    assert "```{mpsrt-options}" in page
    assert "| `MPSRT_" not in page, "docs/environment.md keeps a hand-written table row"
    text = "\n".join(_tables_ext().options_table(mpsrt.options()))
    for name, o in opts.items():
        row = re.search(rf"^\| `{name}` \|.*$", text, re.M)
        assert row, f"{name} is missing from the generated table"
        if o["alias"]:
            assert f"`{o['alias']}`" in row.group(0)
        assert f"`{o['default']}`" in row.group(0)
        assert " ".join(o["help"].split()).replace("|", "\\|") in row.group(0)


def test_values_in_force(runtime_env) -> None:
    with runtime_env(PYTORCH_MPS_HIGH_WATERMARK_RATIO="1.25", MPSRT_LOW_WATERMARK_RATIO="0.5"):
        opts = {o["name"]: o["value"] for o in mpsrt.options()}
        assert opts["MPSRT_HIGH_WATERMARK_RATIO"] == "1.25"
        assert opts["MPSRT_LOW_WATERMARK_RATIO"] == "0.5"
    with runtime_env(
        MPSRT_HIGH_WATERMARK_RATIO="1.5",
        PYTORCH_MPS_HIGH_WATERMARK_RATIO="0.3",
        MPSRT_LOW_WATERMARK_RATIO="0.2",
    ):
        opts = {o["name"]: o["value"] for o in mpsrt.options()}
        assert opts["MPSRT_HIGH_WATERMARK_RATIO"] == "1.5"  # the MPSRT_ name wins


@pytest.mark.parametrize(
    ("var", "value", "pattern"),
    [
        ("MPSRT_CPU_DEVICES", "0", r"MPSRT_CPU_DEVICES='0' is not valid: expected an integer"),
        ("MPSRT_CPU_DEVICES", "abc", r"MPSRT_CPU_DEVICES='abc'"),
        ("MPSRT_CPU_DEVICES", "-2", r"MPSRT_CPU_DEVICES='-2'"),
        ("MPSRT_HIGH_WATERMARK_RATIO", "nan", r"MPSRT_HIGH_WATERMARK_RATIO='nan'.*from 0 to 2"),
        ("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "-1", r"PYTORCH_MPS_HIGH_WATERMARK_RATIO='-1'"),
        ("MPSRT_LOW_WATERMARK_RATIO", "1.9", r"MPSRT_LOW_WATERMARK_RATIO \(1.9\) must not exceed"),
        ("MPSRT_HIGH_WATERMARK_RATIO", "2.5", r"MPSRT_HIGH_WATERMARK_RATIO=.2.5.*from 0 to 2"),
        ("MPSRT_DEBUG_ALLOCATOR", "0x10", r"MPSRT_DEBUG_ALLOCATOR='0x10'.*bitmask"),
        ("MPSRT_TRACE_SIGNPOSTS", "1x", r"MPSRT_TRACE_SIGNPOSTS='1x'"),
        ("MPSRT_CPU_SPIN_US", "", r"MPSRT_CPU_SPIN_US=''"),
        ("MPSRT_CPU_ISA", "sse9", r"MPSRT_CPU_ISA='sse9'.*auto, avx512, avx2, scalar"),
        ("MPSRT_BACKEND", "nope", r"MPSRT_BACKEND='nope'.*one of cpu, vulkan, metal"),
        ("MPSRT_VULKAN_MEMORY", "unified", r"MPSRT_VULKAN_MEMORY='unified'.*auto or discrete"),
        ("MPSRT_STAGING_BYTES", "4096", r"MPSRT_STAGING_BYTES='4096'.*from 65536 to"),
        ("MPSRT_STAGING_BYTES", "64MiB", r"MPSRT_STAGING_BYTES='64MiB'.*\(bytes\)"),
        ("MPSRT_VULKAN_WORKGROUP", "100", r"MPSRT_VULKAN_WORKGROUP='100'.*power of two"),
        ("MPSRT_VULKAN_GROUPS_PER_SM", "-1", r"MPSRT_VULKAN_GROUPS_PER_SM='-1'"),
        ("MPSRT_VULKAN_UNROLL", "3", r"MPSRT_VULKAN_UNROLL='3'.*1, 2, 4 or 8"),
        ("MPSRT_VULKAN_VECTOR", "8", r"MPSRT_VULKAN_VECTOR='8'.*16 or 4"),
        ("MPSRT_VULKAN_COPY", "fast", r"MPSRT_VULKAN_COPY='fast'.*kernel or dma"),
    ],
)
def test_bad_value_is_a_clear_error_and_recoverable(
    backend: str, var: str, value: str, pattern: str
) -> None:
    import os

    env = dict(os.environ)
    env["MPSRT_BACKEND"] = backend
    env[var] = value
    mpsrt._C._reset_runtime(env)
    try:
        with pytest.raises(ValueError, match=pattern):
            mpsrt.device_count()
        with pytest.raises(ValueError, match=pattern):  # every call says so, none hangs
            mpsrt.synchronize()
    finally:
        reset_runtime(backend)  # the backend under test again, even when `var` named another
    assert mpsrt.device_count() >= 1
    assert mpsrt.backend() == backend


def test_env_is_read_at_first_use_in_a_fresh_process(backend: str) -> None:
    r = run_python(
        "import mpsrt; print(mpsrt.device_count(), mpsrt.backend())",
        backend=backend,
        MPSRT_CPU_DEVICES="3",
    )
    assert r.returncode == 0, r.stderr
    count, name = r.stdout.split()
    assert name == backend
    if backend == "cpu":
        assert count == "3"


def test_unknown_backend_in_a_fresh_process() -> None:
    r = run_python("import mpsrt; mpsrt.device_count()", MPSRT_BACKEND="nope")
    assert r.returncode != 0
    built = ", ".join(mpsrt._C.built_backends())
    assert "ValueError: [options] MPSRT_BACKEND='nope' is not valid" in r.stderr
    assert f"(built into this package: {built})" in r.stderr


def test_unbuilt_backend_lists_the_built_ones() -> None:
    unbuilt = [b for b in ("vulkan", "metal") if b not in mpsrt._C.built_backends()]
    if not unbuilt:
        pytest.skip("every backend is built here")
    r = run_python("import mpsrt; mpsrt.backend()", MPSRT_BACKEND=unbuilt[0])
    assert r.returncode != 0
    built = ", ".join(mpsrt._C.built_backends())
    assert "mpsrt was built without" in r.stderr
    assert f"built backends: {built}" in r.stderr


def test_acceptance_command(backend: str) -> None:
    r = run_python(
        "import mpsrt; print(mpsrt.backend(), mpsrt.device_count(), mpsrt.get_device_properties())",
        backend=backend,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{backend} ")
    assert "total_memory=" in r.stdout and "unified_memory=" in r.stdout
