"""The C API table that the PyTorch device's glue reads (the capsule mpsrt._C._c_api, header
mpsrt/include/mpsrt/c_api.h): complete and laid out as the installed header says. Needs no
torch. The entries' signatures are checked by the compiler (csrc/c_api/ assigns each
field by name from a function of the field's type)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import mpsrt
from mpsrt import _C

HEADER = Path(mpsrt.__file__).resolve().parent / "include" / "mpsrt" / "c_api.h"


def _table() -> tuple[int, int, list[int]]:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get(_C._c_api, b"mpsrt._C._c_api")
    version, size = (ctypes.c_uint32 * 2).from_address(address)
    pointer = ctypes.sizeof(ctypes.c_void_p)
    entries = (ctypes.c_void_p * ((size - 8) // pointer)).from_address(address + 8)
    return version, size, [e or 0 for e in entries]


def _header_entries() -> list[str]:
    text = HEADER.read_text()
    struct = text[text.index("typedef struct MpsrtCApi {") : text.index("} MpsrtCApi;")]
    # One field a line, indented two spaces (continuation lines are indented further).
    return re.findall(r"^  [A-Za-z].*?\(\*(\w+)\)\(", struct, re.M)


def test_every_entry_of_the_table_is_set() -> None:
    version, size, entries = _table()
    names = _header_entries()
    assert version == _C._c_api_version == 6
    assert names[0] == "last_error" and names[-1] == "host_op_enter"
    assert size == 8 + ctypes.sizeof(ctypes.c_void_p) * len(names)
    missing = [name for name, entry in zip(names, entries) if entry == 0]
    assert not missing, missing
