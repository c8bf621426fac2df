"""torch.mpsrt.kernel_ops() and the op table (docs/ops.md, written by python -m
mpsrt.torch.op_table): the committed table is the one the installed glue generates."""

from __future__ import annotations

import pathlib

import pytest
from kernel_check import torch
from mpsrt.torch import op_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ops.md"


def test_the_committed_op_table_is_the_generated_one() -> None:
    assert DOC.is_file(), f"{DOC} is missing: python -m mpsrt.torch.op_table --output docs/ops.md"
    assert DOC.read_text() == op_table.table(), (
        "docs/ops.md is not the op table of these kernels: regenerate it with "
        "python -m mpsrt.torch.op_table --output docs/ops.md"
    )


def test_every_kernel_op_has_a_row_and_a_family() -> None:
    text = op_table.table()
    ops = torch.mpsrt._kernel_ops()
    rows = [line for line in text.splitlines() if line.startswith("| `aten::")]
    assert [row.split("`")[1] for row in rows] == ops
    families = {row.rsplit("|", 2)[1].strip() for row in rows}
    glue = ROOT / "csrc" / "torch" / "ops"
    for family in families:
        assert (glue / f"{family}.cpp").is_file(), f"family {family!r} has no glue file"
    assert op_table.families()["add_Tensor"] == "elementwise"
    assert "| `aten::native_layer_norm` | norm |" in rows


def test_check_tells_a_stale_table(tmp_path: pathlib.Path) -> None:
    fresh, stale = tmp_path / "fresh.md", tmp_path / "stale.md"
    assert op_table.main(["--output", str(fresh)]) == 0
    assert op_table.main(["--check", str(fresh)]) == 0
    stale.write_text(fresh.read_text().replace("| `aten::mm` | gemm |\n", ""))
    assert op_table.main(["--check", str(stale)]) == 1
    assert op_table.main(["--check", str(tmp_path / "missing.md")]) == 1


def test_kernel_ops_are_those_the_device_runs(device_kernels: bool) -> None:
    ops = torch.mpsrt.kernel_ops()
    if device_kernels:
        assert ops == torch.mpsrt._kernel_ops() and "aten::mm" in ops
    else:  # the cpu backend: every op runs as a CPU kernel
        assert ops == []
    previous = torch.mpsrt._set_kernels("cpu")
    try:
        assert torch.mpsrt.kernel_ops() == []
        assert torch.mpsrt.kernel_ops(0) == []
    finally:
        torch.mpsrt._set_kernels(previous)
    with pytest.raises((ValueError, RuntimeError)):
        torch.mpsrt.kernel_ops(99)
