#!/usr/bin/env python3
"""Cross-check the Metal stand-in headers (tests/metal_stubs) against Apple's API data.

The reference is a pinned pyobjc-framework-Metal macOS wheel, used as data only (nothing
from it is imported or run):

* Metal/_metadata.py: enum values, struct encodings, function signatures, and ObjC type
  encodings for protocol methods (recorded under NSObject) and for some class methods;
* Metal/_Metal*.so: the Objective-C protocol records that Apple's compiler emitted
  (per-protocol method lists with extended type encodings), read from the x86_64 Mach-O
  slice. These cover only the protocols that the extension references.

The stand-ins' side comes from clang: the JSON AST of a translation unit that includes
<Foundation/Foundation.h> and <Metal/Metal.h> gives the declarations, and a generated
translation unit compiled to LLVM IR gives `@encode(...)` of every type involved and the
value of every enum constant.

Usage:
    metal_stubs_check.py WHEEL_OR_DIR [--stubs tests/metal_stubs] [--clang clang-14]
    metal_stubs_check.py WHEEL_OR_DIR --self-test

Exit status: 0 when everything checked agrees, 1 on any mismatch or when nothing was
checked, 2 on a usage or tool error.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLANG_FLAGS = [
    "-x",
    "objective-c++",
    "-std=c++17",
    "-fobjc-arc",
    "-fblocks",
    "-fobjc-runtime=macosx-13.0",
    "-w",
]
U64 = 1 << 64


class ToolError(Exception):
    pass


# --------------------------------------------------------------------------------------
# ObjC type encodings
# --------------------------------------------------------------------------------------

QUALIFIERS = "rnNoORVA"
INT_WIDTH = {"c": 1, "C": 1, "s": 2, "S": 2, "i": 4, "I": 4, "l": 4, "L": 4, "q": 8, "Q": 8}


def parse_encoding(s: str, i: int = 0) -> tuple[tuple, int]:
    """Parse one type from an ObjC encoding; offsets (digits) after it are skipped."""
    while i < len(s) and s[i] in QUALIFIERS:
        i += 1
    if i >= len(s):
        raise ValueError(f"truncated encoding {s!r}")
    c = s[i]
    i += 1
    if c == "@":
        if s.startswith("?", i):
            i += 1
            sig = None
            if s.startswith("<", i):
                end = _matching(s, i, "<", ">")
                sig = s[i + 1 : end]
                i = end + 1
            node = ("block", sig)
        elif s.startswith('"', i):
            end = s.index('"', i + 1)
            node = ("obj", s[i + 1 : end])
            i = end + 1
        else:
            node = ("obj", "")
    elif c == "^":
        inner, i = parse_encoding(s, i)
        node = ("ptr", inner)
    elif c in "{(":
        close = "}" if c == "{" else ")"
        end = _matching(s, i - 1, c, close)
        body = s[i:end]
        name, sep, fields = body.partition("=")
        members = []
        j = 0
        while j < len(fields):
            if fields[j] == '"':  # field names in some encodings
                j = fields.index('"', j + 1) + 1
                continue
            m, j = parse_encoding(fields, j)
            members.append(m)
        node = ("struct" if c == "{" else "union", name, tuple(members) if sep else None)
        i = end + 1
    elif c == "[":
        end = _matching(s, i - 1, "[", "]")
        m = re.match(r"\d+", s[i:end])
        count = int(m.group()) if m else 0
        inner, _ = parse_encoding(s[i + (m.end() if m else 0) : end])
        node = ("array", count, inner)
        i = end + 1
    elif c == "b":
        m = re.match(r"\d+", s[i:])
        node = ("bitfield", int(m.group()) if m else 0)
        i += m.end() if m else 0
    else:
        node = ("prim", c)
    while i < len(s) and s[i].isdigit():
        i += 1
    return node, i


def _matching(s: str, i: int, open_: str, close: str) -> int:
    depth = 0
    in_quote = False
    for j in range(i, len(s)):
        ch = s[j]
        if ch == '"':
            in_quote = not in_quote
        elif in_quote:
            continue
        elif ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced {open_} in {s!r}")


def parse_sequence(s: str) -> list[tuple]:
    out = []
    i = 0
    while i < len(s):
        node, i = parse_encoding(s, i)
        out.append(node)
    return out


def render(node: tuple) -> str:
    kind = node[0]
    if kind == "prim":
        return node[1]
    if kind == "obj":
        return f'@"{node[1]}"' if node[1] else "@"
    if kind == "block":
        return "@?"
    if kind == "ptr":
        return "^" + render(node[1])
    if kind in ("struct", "union"):
        o, c = ("{", "}") if kind == "struct" else ("(", ")")
        body = "" if node[2] is None else "=" + "".join(render(m) for m in node[2])
        return f"{o}{node[1]}{body}{c}"
    if kind == "array":
        return f"[{node[1]}{render(node[2])}]"
    return f"b{node[1]}"


def _struct_name(name: str) -> str:
    return name.lstrip("_")


def compatible(stub: tuple, ref: tuple, extended: bool = True) -> bool:
    """Is the stand-in's encoding `stub` compatible with the reference `ref`?

    Integers compare by width, not signedness. 'Z' marks a stand-in BOOL/bool. A
    reference 'c' may be BOOL on x86_64, so it accepts BOOL too. Object types compare as
    '@'; when both sides name a class or protocol (extended encodings), the names must
    agree too.
    """
    sk, rk = stub[0], ref[0]
    if rk == "prim" and sk == "prim":
        s, r = stub[1], ref[1]
        if r in "ZB":
            return s in "ZB"
        if r == "c" and s in "ZB":
            return True
        if s in "ZB":
            return r in "ZBc"
        if r in INT_WIDTH and s in INT_WIDTH:
            return INT_WIDTH[r] == INT_WIDTH[s]
        return s == r
    if rk == "obj":
        if sk != "obj":
            return False
        if extended and ref[1] and stub[1]:
            return ref[1] == stub[1]
        return True
    if rk == "block":
        return sk == "block"
    if rk == "ptr":
        return sk == "ptr" and compatible(stub[1], ref[1], extended)
    if rk in ("struct", "union"):
        if sk != rk:
            return False
        sn, rn = _struct_name(stub[1]), _struct_name(ref[1])
        if sn not in ("?", "") and rn not in ("?", "") and sn != rn:
            return False
        if stub[2] is None or ref[2] is None:
            return True
        return len(stub[2]) == len(ref[2]) and all(
            compatible(a, b, extended) for a, b in zip(stub[2], ref[2])
        )
    if rk == "array":
        return sk == "array" and stub[1] == ref[1] and compatible(stub[2], ref[2], extended)
    return stub == ref


def enc_of(raw) -> tuple | None:
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode()
    try:
        return parse_encoding(raw)[0]
    except (ValueError, IndexError):
        return None


# --------------------------------------------------------------------------------------
# Reference data: pyobjc-framework-Metal wheel
# --------------------------------------------------------------------------------------


@dataclass
class RefSig:
    source: str
    ret: tuple | None = None
    args: dict[int, tuple] = field(default_factory=dict)
    blocks: dict[int, tuple[tuple | None, list[tuple | None]]] = field(default_factory=dict)


@dataclass
class RefProtocol:
    parents: list[str]
    instance: dict[str, RefSig]
    klass: dict[str, RefSig]


@dataclass
class Reference:
    enums: dict[str, int]
    structs: dict[str, tuple]
    functions: dict[str, list[tuple]]
    nsobject: dict[str, RefSig]
    classes: dict[str, dict[str, RefSig]]
    protocols: dict[str, RefProtocol]
    version: str

    def protocol_closure(self, name: str) -> list[str]:
        seen: list[str] = []
        todo = [name]
        while todo:
            p = todo.pop()
            if p in seen or p not in self.protocols:
                continue
            seen.append(p)
            todo.extend(self.protocols[p].parents)
        return seen

    def generic(self, sel: str) -> list[RefSig]:
        found = []
        if sel in self.nsobject:
            found.append(self.nsobject[sel])
        for table in self.classes.values():
            if sel in table:
                found.append(table[sel])
        for proto in self.protocols.values():
            for table in (proto.instance, proto.klass):
                if sel in table:
                    found.append(table[sel])
        return found


def _literal(node: ast.AST):
    """literal_eval that also resolves pyobjc's sel32or64/selAorI helpers (64-bit, arm64)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "sel32or64" and len(node.args) == 2:
            return _literal(node.args[1])
        if node.func.id == "selAorI" and len(node.args) == 2:
            return _literal(node.args[0])
        raise ValueError("call")
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    return ast.literal_eval(node)


def _sig_from_meta(meta: dict, source: str) -> RefSig:
    sig = RefSig(source)
    ret = meta.get("retval", {})
    if isinstance(ret, dict) and "type" in ret:
        sig.ret = enc_of(ret["type"])
    for idx, arg in (meta.get("arguments") or {}).items():
        if not isinstance(arg, dict) or not isinstance(idx, int):
            continue
        if "type" in arg:
            enc = enc_of(arg["type"])
            if enc is not None:
                sig.args[idx - 2] = enc
        cb = arg.get("callable")
        if isinstance(cb, dict):
            cret = enc_of((cb.get("retval") or {}).get("type"))
            cargs = cb.get("arguments") or {}
            params = [enc_of((cargs[k] or {}).get("type")) for k in sorted(cargs) if k != 0]
            sig.blocks[idx - 2] = (cret, params)
    return sig


def _eval_expression(expr: str, values: dict[str, int]) -> int | None:
    env = dict(values)
    env["NSUIntegerMax"] = U64 - 1
    env["NSIntegerMax"] = (1 << 63) - 1

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in env:
            return env[n.id]
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            ops = {
                ast.LShift: lambda: a << b,
                ast.RShift: lambda: a >> b,
                ast.BitOr: lambda: a | b,
                ast.BitAnd: lambda: a & b,
                ast.Add: lambda: a + b,
                ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b,
            }
            if type(n.op) in ops:
                return ops[type(n.op)]()
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert):
            return ~ev(n.operand)
        raise ValueError(expr)

    try:
        return ev(ast.parse(expr, mode="eval").body)
    except (ValueError, SyntaxError):
        return None


def _read_wheel(path: Path) -> tuple[str, bytes, str]:
    """Return (metadata source, extension bytes, version) from a .whl or an unpacked dir."""
    if path.is_file() and path.suffix == ".whl":
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            meta = next((n for n in names if n.endswith("Metal/_metadata.py")), None)
            so = next((n for n in names if re.search(r"Metal/_Metal[^/]*\.so$", n)), None)
            if meta is None:
                raise ToolError(f"{path}: no Metal/_metadata.py inside")
            src = zf.read(meta).decode()
            blob = zf.read(so) if so else b""
    elif path.is_dir():
        metas = sorted(path.rglob("Metal/_metadata.py"))
        if not metas:
            raise ToolError(f"{path}: no Metal/_metadata.py below it")
        src = metas[0].read_text()
        sos = sorted(metas[0].parent.glob("_Metal*.so"))
        blob = sos[0].read_bytes() if sos else b""
    else:
        raise ToolError(f"{path}: not a .whl file or a directory")
    names = (
        [str(path), *(p.name for p in path.glob("*.dist-info"))] if path.is_dir() else [path.name]
    )
    for name in names:
        m = re.search(r"pyobjc_framework_metal-([0-9][^-/]*?)(?:\.dist-info)?(?:-|$)", name, re.I)
        if m:
            return src, blob, m.group(1)
    return src, blob, "?"


def load_reference(path: Path) -> Reference:
    src, blob, version = _read_wheel(path)
    tree = ast.parse(src)
    enums: dict[str, int] = {}
    aliases: dict[str, str] = {}
    expressions: dict[str, str] = {}
    structs: dict[str, tuple] = {}
    functions: dict[str, list[tuple]] = {}
    nsobject: dict[str, RefSig] = {}
    classes: dict[str, dict[str, RefSig]] = {}

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            name = target.id if isinstance(target, ast.Name) else None
            try:
                if name == "enums":
                    text = _literal(node.value)
                    for item in text.strip("$").split("$"):
                        key, _, val = item.partition("@")
                        if val:
                            try:
                                enums[key] = int(val)
                            except ValueError:
                                pass
                elif name == "aliases":
                    aliases = {k: v for k, v in _literal(node.value).items() if isinstance(v, str)}
                elif name == "expressions":
                    expressions = _literal(node.value)
                elif name == "functions":
                    for key, val in _literal(node.value).items():
                        try:
                            functions[key] = parse_sequence(val[0].decode())
                        except (ValueError, IndexError, AttributeError):
                            pass
            except ValueError:
                pass
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if fname == "createStructType" and len(node.args) >= 2:
                try:
                    name = _literal(node.args[0]).split(".")[-1]
                    enc = enc_of(_literal(node.args[1]))
                except ValueError:
                    continue
                if enc is not None:
                    structs[name] = enc
            elif fname == "r" and len(node.args) == 3:
                try:
                    cls, sel, meta = (_literal(a) for a in node.args)
                except ValueError:
                    continue
                cls, sel = cls.decode(), sel.decode()
                sig = _sig_from_meta(meta, f"_metadata.py {cls}")
                if cls == "NSObject":
                    nsobject[sel] = sig
                else:
                    classes.setdefault(cls, {})[sel] = sig

    for _ in range(4):  # aliases and expressions may refer to each other
        for key, target in aliases.items():
            if target in enums:
                enums.setdefault(key, enums[target])
        for key, expr in expressions.items():
            if key not in enums:
                val = _eval_expression(expr, enums)
                if val is not None:
                    enums[key] = val

    protocols = read_macho_protocols(blob) if blob else {}
    return Reference(enums, structs, functions, nsobject, classes, protocols, version)


# --------------------------------------------------------------------------------------
# Reference data: Objective-C protocol records in the extension's Mach-O (x86_64 slice)
# --------------------------------------------------------------------------------------


class _MachO:
    def __init__(self, data: bytes):
        self.d = data
        magic, _cpu, _sub, _ft, ncmds, _size, _flags, _res = struct.unpack_from("<IiiIIIII", data)
        if magic != 0xFEEDFACF:
            raise ValueError("not a 64-bit little-endian Mach-O")
        self.segs: list[tuple[int, int, int]] = []
        self.sects: dict[tuple[str, str], tuple[int, int]] = {}
        p = 32
        for _ in range(ncmds):
            cmd, size = struct.unpack_from("<II", data, p)
            if cmd == 0x19:  # LC_SEGMENT_64
                vmaddr, vmsize, fileoff = struct.unpack_from("<QQQ", data, p + 24)
                nsects = struct.unpack_from("<I", data, p + 64)[0]
                self.segs.append((vmaddr, vmsize, fileoff))
                for k in range(nsects):
                    q = p + 72 + 80 * k
                    sect = data[q : q + 16].rstrip(b"\0").decode()
                    seg = data[q + 16 : q + 32].rstrip(b"\0").decode()
                    addr, sz = struct.unpack_from("<QQ", data, q + 32)
                    self.sects[(seg, sect)] = (addr, sz)
            p += size
        self.base = min((s[0] for s in self.segs), default=0)

    def off(self, vm: int) -> int:
        for vmaddr, vmsize, fileoff in self.segs:
            if vmaddr <= vm < vmaddr + vmsize:
                return vm - vmaddr + fileoff
        raise ValueError(hex(vm))

    def ptr(self, vm: int) -> int:
        raw = struct.unpack_from("<Q", self.d, self.off(vm))[0]
        if raw >> 63:  # chained-fixup bind: an external symbol, not ours
            return 0
        if raw >> 36 & 0xFFF:  # chained-fixup rebase (DYLD_CHAINED_PTR_64[_OFFSET])
            target = raw & ((1 << 36) - 1)
            return target if target >= self.base else target + self.base
        return raw

    def u32(self, vm: int) -> int:
        return struct.unpack_from("<I", self.d, self.off(vm))[0]

    def cstr(self, vm: int) -> str:
        o = self.off(vm)
        return self.d[o : self.d.index(b"\0", o)].decode()


def _thin_slice(blob: bytes) -> bytes | None:
    if blob[:4] == b"\xca\xfe\xba\xbe":
        n = struct.unpack_from(">I", blob, 4)[0]
        slices = {}
        for k in range(n):
            cpu, _sub, off, size, _align = struct.unpack_from(">iiIII", blob, 8 + 20 * k)
            slices[cpu] = blob[off : off + size]
        return slices.get(0x01000007) or slices.get(0x0100000C)
    if blob[:4] == b"\xcf\xfa\xed\xfe":
        return blob
    return None


def read_macho_protocols(blob: bytes) -> dict[str, RefProtocol]:
    thin = _thin_slice(blob)
    if thin is None:
        return {}
    try:
        mo = _MachO(thin)
    except (ValueError, struct.error):
        return {}
    out: dict[str, RefProtocol] = {}
    sect = mo.sects.get(("__DATA", "__objc_protolist")) or mo.sects.get(
        ("__DATA_CONST", "__objc_protolist")
    )
    if not sect:
        return out
    addr, size = sect

    def methods(vm: int) -> list[tuple[str, str]]:
        if not vm:
            return []
        flags, count = mo.u32(vm), mo.u32(vm + 4)
        entsize = flags & 0xFFFC
        res = []
        for k in range(count):
            e = vm + 8 + entsize * k
            if flags & 0x80000000:  # relative method list
                name_ref = e + struct.unpack_from("<i", mo.d, mo.off(e))[0]
                types = e + 4 + struct.unpack_from("<i", mo.d, mo.off(e + 4))[0]
                res.append((mo.cstr(mo.ptr(name_ref)), mo.cstr(types)))
            else:
                res.append((mo.cstr(mo.ptr(e)), mo.cstr(mo.ptr(e + 8))))
        return res

    for k in range(size // 8):
        try:
            pv = mo.ptr(addr + 8 * k)
            name = mo.cstr(mo.ptr(pv + 8))
            parents = []
            plist = mo.ptr(pv + 16)
            if plist:
                count = struct.unpack_from("<Q", mo.d, mo.off(plist))[0]
                for j in range(count):
                    parents.append(mo.cstr(mo.ptr(mo.ptr(plist + 8 + 8 * j) + 8)))
            lists = [methods(mo.ptr(pv + 24 + 8 * j)) for j in range(4)]
            psize = mo.u32(pv + 64)
            ext_vm = mo.ptr(pv + 72) if psize >= 80 else 0
            total = sum(len(x) for x in lists)
            ext = [mo.cstr(mo.ptr(ext_vm + 8 * j)) for j in range(total)] if ext_vm else []
        except (ValueError, struct.error, UnicodeDecodeError):
            continue
        proto = RefProtocol(parents, {}, {})
        pos = 0
        for j, lst in enumerate(lists):  # required inst, required class, opt inst, opt class
            table = proto.instance if j in (0, 2) else proto.klass
            for sel, types in lst:
                full = ext[pos] if pos < len(ext) else types
                pos += 1
                try:
                    seq = parse_sequence(full)
                except (ValueError, IndexError):
                    seq = parse_sequence(types)
                sig = RefSig(f"_Metal.so protocol {name}", seq[0])
                sig.args = dict(enumerate(seq[3:]))
                for idx, node in sig.args.items():
                    if node[0] == "block" and node[1]:
                        try:
                            bseq = parse_sequence(node[1])
                            sig.blocks[idx] = (bseq[0], bseq[2:])
                        except (ValueError, IndexError):
                            pass
                table[sel] = sig
        out[name] = proto
    return out


# --------------------------------------------------------------------------------------
# Stand-in side: clang
# --------------------------------------------------------------------------------------


@dataclass
class StubMethod:
    container: str
    container_kind: str  # "protocol" or "class"
    selector: str
    instance: bool
    ret: str
    params: list[str]
    ret_desugared: str = ""
    params_desugared: list[str] = field(default_factory=list)
    implicit: bool = False  # a property accessor

    @property
    def where(self) -> str:
        sign = "-" if self.instance else "+"
        return f"{sign}[{self.container} {self.selector}]"


@dataclass
class StubDecls:
    methods: list[StubMethod] = field(default_factory=list)
    enum_names: list[str] = field(default_factory=list)
    struct_names: list[str] = field(default_factory=list)
    functions: dict[str, tuple[str, list[str]]] = field(default_factory=dict)


def _clang_run(clang: str, args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([clang, *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise ToolError(f"{clang} not found (install clang-14): {exc}") from exc


def _walk_locs(obj, state: dict) -> None:
    if isinstance(obj, dict):
        if "file" in obj and ("offset" in obj or "line" in obj):
            state["file"] = obj["file"]
        for key, val in obj.items():
            if key in ("loc", "range", "spellingLoc", "expansionLoc", "begin", "end"):
                _walk_locs(val, state)
            elif key == "inner":
                for child in val:
                    _walk_locs(child, state)
    elif isinstance(obj, list):
        for child in obj:
            _walk_locs(child, state)


def _decl_file(node: dict, state: dict) -> str:
    """Track the JSON dumper's 'file elided when unchanged' state; return node's file."""
    loc = node.get("loc", {})
    _walk_locs({"loc": loc}, state)
    file_here = state.get("file", "")  # expansionLoc is printed last: the declaring file
    for key in ("range", "inner"):
        if key in node:
            _walk_locs({key: node[key]}, state)
    return file_here


def collect_stubs(stubs: Path, clang: str, workdir: Path) -> StubDecls:
    tu = workdir / "mck_decls.mm"
    tu.write_text("#import <Foundation/Foundation.h>\n#import <Metal/Metal.h>\n")
    proc = _clang_run(
        clang,
        [*CLANG_FLAGS, "-fsyntax-only", "-Xclang", "-ast-dump=json", f"-I{stubs}", str(tu)],
    )
    if proc.returncode != 0:
        raise ToolError(f"clang could not parse the stand-ins:\n{proc.stderr[-4000:]}")
    root = json.loads(proc.stdout)
    metal_dir = str((stubs / "Metal").resolve())
    decls = StubDecls()
    state: dict = {}
    seen_methods: set[tuple[str, str, bool]] = set()

    def in_metal(path: str) -> bool:
        try:
            return str(Path(path).resolve()).startswith(metal_dir + os.sep)
        except OSError:
            return False

    def top_level(nodes):
        for node in nodes:
            if node.get("kind") in ("LinkageSpecDecl", "NamespaceDecl"):
                _walk_locs({"loc": node.get("loc", {}), "range": node.get("range", {})}, state)
                yield from top_level(node.get("inner", []))
            else:
                yield node, _decl_file(node, state)

    for node, path in top_level(root.get("inner", [])):
        if not in_metal(path) or node.get("isImplicit"):
            continue
        kind = node.get("kind")
        name = node.get("name", "")
        if kind in ("ObjCProtocolDecl", "ObjCInterfaceDecl", "ObjCCategoryDecl"):
            ckind = "protocol" if kind == "ObjCProtocolDecl" else "class"
            container = name if kind != "ObjCCategoryDecl" else node["interface"]["name"]
            for child in node.get("inner", []):
                if child.get("kind") != "ObjCMethodDecl":
                    continue
                key = (container, child["name"], child.get("instance", True))
                if key in seen_methods:
                    continue
                seen_methods.add(key)
                params = [p for p in child.get("inner", []) if p.get("kind") == "ParmVarDecl"]
                rt = child["returnType"]
                decls.methods.append(
                    StubMethod(
                        container,
                        ckind,
                        child["name"],
                        child.get("instance", True),
                        rt["qualType"],
                        [p["type"]["qualType"] for p in params],
                        rt.get("desugaredQualType", rt["qualType"]),
                        [p["type"].get("desugaredQualType", p["type"]["qualType"]) for p in params],
                        bool(child.get("isImplicit")),
                    )
                )
        elif kind == "EnumDecl":
            for child in node.get("inner", []):
                if child.get("kind") == "EnumConstantDecl":
                    decls.enum_names.append(child["name"])
        elif kind == "TypedefDecl":
            desugared = node.get("type", {}).get("desugaredQualType", "")
            qual = node.get("type", {}).get("qualType", "")
            if desugared.startswith("struct") or qual.startswith("struct"):
                decls.struct_names.append(name)
        elif kind == "RecordDecl" and name and node.get("completeDefinition"):
            if not name.startswith("_"):
                decls.struct_names.append(name)
        elif kind == "FunctionDecl" and name:
            ftype = node.get("type", {}).get("qualType", "")
            params = [
                p["type"]["qualType"]
                for p in node.get("inner", [])
                if p.get("kind") == "ParmVarDecl"
            ]
            decls.functions[name] = (ftype.split("(")[0].strip(), params)
        elif kind == "VarDecl" and name and "const" in node.get("type", {}).get("qualType", ""):
            if node.get("inner"):
                decls.enum_names.append(name)

    # object-like macros that the Metal stand-in defines (e.g. shift constants)
    base = workdir / "mck_base.mm"
    base.write_text("#import <Foundation/Foundation.h>\n")
    macros = []
    outs = []
    for unit in (base, tu):
        proc = _clang_run(clang, [*CLANG_FLAGS, "-E", "-dM", f"-I{stubs}", str(unit)])
        if proc.returncode != 0:
            raise ToolError(f"clang -E -dM failed:\n{proc.stderr[-2000:]}")
        outs.append({ln.split()[1] for ln in proc.stdout.splitlines() if len(ln.split()) > 2})
    for name in sorted(outs[1] - outs[0]):
        if "(" not in name and re.match(r"MTL\w+$", name):
            macros.append(name)
    decls.enum_names.extend(m for m in macros if m not in decls.enum_names)
    decls.struct_names = list(dict.fromkeys(decls.struct_names))
    return decls


_NULLABILITY = re.compile(r"\b(_Nonnull|_Nullable|_Null_unspecified|__strong|__autoreleasing)\b")


def _clean_type(t: str) -> str:
    t = re.sub(r"\binstancetype\b", "id", t)
    return t.strip()


def _is_bool(t: str) -> bool:
    core = _NULLABILITY.sub("", t).replace("const", "").strip()
    return core in ("BOOL", "bool", "_Bool")


def _object_name(t: str) -> str:
    """Class or protocol named by an object type string ('' for id/unknown)."""
    core = _NULLABILITY.sub("", t).strip()
    core = re.sub(r"\b__kindof\b", "", core).strip()
    m = re.fullmatch(r"id\s*<\s*(\w+)\s*>", core)
    if m:
        return f"<{m.group(1)}>"
    m = re.fullmatch(r"(\w+)\s*(<.*>)?\s*\*", core)
    if m and m.group(1) not in ("id", "void", "char"):
        return m.group(1)
    return ""


def _block_parts(t: str) -> tuple[str, list[str]] | None:
    """Split 'R (^...)(A, B)' into ('R', ['A', 'B'])."""
    idx = t.find("(^")
    if idx < 0:
        return None
    close = _matching(t, idx, "(", ")")
    rest = t[close + 1 :].strip()
    if not rest.startswith("("):
        return None
    end = _matching(rest, 0, "(", ")")
    inner = rest[1:end]
    params: list[str] = []
    depth = 0
    cur = ""
    for ch in inner:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            params.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip() and cur.strip() != "void":
        params.append(cur.strip())
    return t[:idx].strip(), params


class Encoder:
    """@encode and integer values computed by clang in one generated translation unit."""

    def __init__(self, stubs: Path, clang: str, workdir: Path):
        self.stubs, self.clang, self.workdir = stubs, clang, workdir
        self.types: dict[str, tuple | None] = {}
        self.values: dict[str, int | None] = {}

    def run(self, types: list[str], names: list[str]) -> None:
        types = list(dict.fromkeys(t for t in types if t not in self.types))
        names = list(dict.fromkeys(n for n in names if n not in self.values))
        pending_t, pending_v = dict(enumerate(types)), dict(enumerate(names))
        for _attempt in range(8):
            if not pending_t and not pending_v:
                break
            lines = ["#import <Foundation/Foundation.h>", "#import <Metal/Metal.h>", 'extern "C" {']
            where: dict[int, tuple[str, int]] = {}
            for k, t in pending_t.items():
                where[len(lines) + 1] = ("t", k)
                lines.append(f"const char *mck_e{k} = @encode({_clean_type(t)});")
            for k, n in pending_v.items():
                where[len(lines) + 1] = ("v", k)
                lines.append(f"unsigned long long mck_v{k} = (unsigned long long)({n});")
            lines.append("}")
            src = self.workdir / "mck_encode.mm"
            src.write_text("\n".join(lines) + "\n")
            proc = _clang_run(
                self.clang,
                [*CLANG_FLAGS, "-S", "-emit-llvm", "-o", "-", f"-I{self.stubs}", str(src)],
            )
            if proc.returncode == 0:
                self._parse_ir(proc.stdout, pending_t, pending_v)
                return
            bad = {
                int(m.group(1))
                for m in re.finditer(rf"{re.escape(src.name)}:(\d+):\d+: error", proc.stderr)
            }
            dropped = False
            for line in bad:
                if line in where:
                    kind, k = where[line]
                    if kind == "t":
                        self.types[pending_t.pop(k)] = None
                    else:
                        self.values[pending_v.pop(k)] = None
                    dropped = True
            if not dropped:
                raise ToolError(f"clang failed on the generated encode TU:\n{proc.stderr[-3000:]}")
        for t in pending_t.values():
            self.types.setdefault(t, None)
        for n in pending_v.values():
            self.values.setdefault(n, None)

    def _parse_ir(self, ir: str, pending_t: dict, pending_v: dict) -> None:
        strings = {}
        for m in re.finditer(
            r'^@([\w.]+) = [^\n]*?constant \[\d+ x i8\] c"((?:[^"\\]|\\.)*)"', ir, re.M
        ):
            raw = re.sub(r"\\([0-9A-Fa-f]{2})", lambda x: chr(int(x.group(1), 16)), m.group(2))
            strings[m.group(1)] = raw.rstrip("\0")
        for m in re.finditer(r"^@mck_e(\d+) = [^\n]*?@([\w.]+),", ir, re.M):
            k = int(m.group(1))
            if k in pending_t:
                self.types[pending_t[k]] = enc_of(strings.get(m.group(2), ""))
        for m in re.finditer(r"^@mck_v(\d+) = [^\n]*? global i64 (-?\d+)", ir, re.M):
            k = int(m.group(1))
            if k in pending_v:
                self.values[pending_v[k]] = int(m.group(2)) % U64
        for t in pending_t.values():
            self.types.setdefault(t, None)
        for n in pending_v.values():
            self.values.setdefault(n, None)

    def encode(self, t: str) -> tuple | None:
        if _is_bool(t):
            return ("prim", "Z")
        enc = self.types.get(t)
        if enc is not None and enc[0] == "obj":
            return ("obj", _object_name(t) if _object_name(t) else "")
        return enc


# --------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------


@dataclass
class Row:
    kind: str
    where: str
    stub: str
    ref: str
    note: str


@dataclass
class Result:
    rows: list[Row] = field(default_factory=list)
    warnings: list[Row] = field(default_factory=list)
    selectors: int = 0
    enums: int = 0
    structs: int = 0
    functions: int = 0

    @property
    def checked(self) -> int:
        return self.selectors + self.enums + self.structs + self.functions


def _fmt(node) -> str:
    return render(node) if node is not None else "?"


def _lookup(ref: Reference, m: StubMethod) -> tuple[list[RefSig], str | None]:
    """Reference signatures for a stand-in method, or an error note."""
    if m.container_kind == "protocol" and m.container in ref.protocols:
        for pname in ref.protocol_closure(m.container):
            table = ref.protocols[pname].instance if m.instance else ref.protocols[pname].klass
            if m.selector in table:
                found = [table[m.selector]]
                if m.selector in ref.nsobject:
                    found.append(ref.nsobject[m.selector])
                return found, None
        chain = " < ".join(ref.protocol_closure(m.container))
        return [], f"not declared by Apple's protocol {m.container} (searched {chain})"
    if m.container_kind == "class":
        table = ref.classes.get(m.container, {})
        if m.selector in table:
            return [table[m.selector]], None
    found = ref.generic(m.selector)
    if found:
        return found, None
    if m.container_kind == "protocol":
        return [], "selector unknown to pyobjc's Metal data"
    return [], "unverified"


def compare(ref: Reference, decls: StubDecls, enc: Encoder) -> Result:
    res = Result()
    for m in decls.methods:
        refs, err = _lookup(ref, m)
        if err == "unverified":
            res.warnings.append(
                Row(
                    "selector",
                    m.where,
                    m.selector,
                    "-",
                    "not in pyobjc's data (it records class selectors only when special)",
                )
            )
            continue
        res.selectors += 1
        if err:
            res.rows.append(Row("selector", m.where, m.selector, "-", err))
            continue
        if m.selector.count(":") != len(m.params):
            res.rows.append(Row("selector", m.where, m.selector, "-", "argument count"))
            continue
        slots = [("return", m.ret, m.ret_desugared, None)] + [
            (f"arg {i + 1}", p, d, i) for i, (p, d) in enumerate(zip(m.params, m.params_desugared))
        ]
        for label, qual, desugared, idx in slots:
            mine = enc.encode(qual)
            if mine is None:
                continue
            theirs = None
            for sig in refs:
                cand = sig.ret if idx is None else sig.args.get(idx)
                if cand is not None:
                    theirs = (cand, sig)
                    break
            if theirs is None:
                continue
            cand, sig = theirs
            extended = "_Metal.so" in sig.source
            if not compatible(mine, cand, extended):
                res.rows.append(
                    Row(
                        "type",
                        f"{m.where} {label}",
                        f"{_fmt(mine)} ({qual})",
                        _fmt(cand),
                        sig.source,
                    )
                )
                continue
            if idx is not None and mine[0] == "block":
                _compare_block(res, m, label, desugared, idx, refs, enc)
    for name in decls.enum_names:
        mine = enc.values.get(name)
        if mine is None:
            continue
        if name not in ref.enums:
            if name.startswith("MTL"):
                res.enums += 1
                res.rows.append(Row("enum", name, str(mine), "-", "constant unknown to pyobjc"))
            continue
        res.enums += 1
        if mine != ref.enums[name] % U64:
            res.rows.append(Row("enum", name, str(mine), str(ref.enums[name]), "value differs"))
    for name in decls.struct_names:
        if name not in ref.structs:
            continue
        mine = enc.types.get(name)
        if mine is None:
            continue
        res.structs += 1
        if not compatible(mine, ref.structs[name]):
            res.rows.append(
                Row("struct", name, _fmt(mine), _fmt(ref.structs[name]), "layout differs")
            )
    for name, (ret, params) in decls.functions.items():
        if name not in ref.functions:
            continue
        res.functions += 1
        sig = ref.functions[name]
        mine = [enc.encode(ret)] + [enc.encode(p) for p in params]
        if len(mine) != len(sig):
            res.rows.append(Row("function", name, str(len(params)), str(len(sig) - 1), "arity"))
            continue
        for k, (a, b) in enumerate(zip(mine, sig)):
            if a is not None and not compatible(a, b):
                label = "return" if k == 0 else f"arg {k}"
                res.rows.append(Row("function", f"{name} {label}", _fmt(a), _fmt(b), "type"))
    return res


def _compare_block(res, m, label, desugared, idx, refs, enc) -> None:
    parts = _block_parts(desugared)
    ref_block = next((s.blocks[idx] for s in refs if idx in s.blocks), None)
    if parts is None or ref_block is None:
        return
    bret, bparams = parts
    rret, rparams = ref_block
    if len(bparams) != len(rparams):
        res.rows.append(
            Row(
                "block",
                f"{m.where} {label}",
                f"{len(bparams)} params ({desugared})",
                f"{len(rparams)} params",
                "block signature",
            )
        )
        return
    for k, (qual, theirs) in enumerate([(bret, rret), *zip(bparams, rparams)]):
        mine = enc.encode(qual)
        if mine is None or theirs is None:
            continue
        if not compatible(mine, theirs, extended=False):
            what = "block return" if k == 0 else f"block param {k}"
            res.rows.append(
                Row(
                    "block", f"{m.where} {label} {what}", f"{_fmt(mine)} ({qual})", _fmt(theirs), ""
                )
            )


def block_types(decls: StubDecls) -> list[str]:
    out = []
    for m in decls.methods:
        for d in m.params_desugared:
            parts = _block_parts(d)
            if parts:
                out.append(parts[0])
                out.extend(parts[1])
    return out


def analyse(ref: Reference, stubs: Path, clang: str) -> tuple[Result, StubDecls, Encoder]:
    with tempfile.TemporaryDirectory(prefix="mck-") as tmp:
        work = Path(tmp)
        decls = collect_stubs(stubs, clang, work)
        enc = Encoder(stubs, clang, work)
        types = [m.ret for m in decls.methods] + [p for m in decls.methods for p in m.params]
        types += block_types(decls) + decls.struct_names
        types += [t for ret, params in decls.functions.values() for t in [ret, *params]]
        enc.run(types, decls.enum_names)
        return compare(ref, decls, enc), decls, enc


def run_check(ref: Reference, stubs: Path, clang: str) -> Result:
    return analyse(ref, stubs, clang)[0]


def print_result(res: Result, ref: Reference, stubs: Path, out=sys.stdout) -> None:
    rows = res.rows
    if rows:
        headers = ("KIND", "WHERE", "STAND-IN", "PYOBJC", "NOTE")
        table = [headers] + [(r.kind, r.where, r.stub, r.ref, r.note) for r in rows]
        widths = [min(60, max(len(row[i]) for row in table)) for i in range(5)]
        for row in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
        print(file=out)
    for w in res.warnings:
        print(f"note: {w.where}: {w.note}", file=out)
    print(
        f"metal stand-ins {stubs} vs pyobjc-framework-Metal {ref.version}: "
        f"{res.selectors} selectors, {res.enums} enum/constant values, {res.structs} structs, "
        f"{res.functions} functions checked; {len(res.warnings)} class selectors unverifiable; "
        f"{len(rows)} mismatches",
        file=out,
    )


# --------------------------------------------------------------------------------------
# Self-test: inject mistakes into a copy of the stand-ins
# --------------------------------------------------------------------------------------

METHOD_HEAD = r"^\s*[-+]\s*\([^;]*?\)\s*"


def _mutate(root: Path, pattern: str, repl: str) -> bool:
    """Apply the first match of `pattern` in the Metal stand-in headers; False if none."""
    for path in sorted((root / "Metal").rglob("*.h")):
        text = path.read_text()
        new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
        if n:
            path.write_text(new)
            return True
    return False


@dataclass
class Mutation:
    desc: str
    edits: list[tuple[str, str]]  # alternatives: the first (pattern, repl) that applies
    caught: object  # callable(new_rows) -> bool

    def apply(self, root: Path) -> bool:
        return any(_mutate(root, pattern, repl) for pattern, repl in self.edits)


def _wrong_type(enc: tuple | None) -> str:
    """A type that must not match `enc`: a narrower integer where one is expected."""
    if enc is not None and enc[0] == "prim" and INT_WIDTH.get(enc[1]) == 8:
        return "uint32_t"
    if enc is not None and enc[0] == "obj":
        return "NSUInteger"
    return "double" if enc != ("prim", "d") else "NSUInteger"


def _checkable(ref: Reference, m: StubMethod) -> RefSig | None:
    refs, err = _lookup(ref, m)
    return None if err or not refs else refs[0]


def mutations(ref: Reference, base: Result, decls: StubDecls, enc: Encoder) -> list[list[Mutation]]:
    """Per kind of mistake, a few candidate injections (the first that applies is used)."""
    bad = {r.where.split(" ")[0] for r in base.rows} | {r.where for r in base.rows}
    out: list[list[Mutation]] = [[], [], [], []]
    explicit = [
        m
        for m in decls.methods
        if m.container_kind == "protocol" and not m.implicit and m.where not in bad
    ]

    # 1. a wrong enum value
    for name in decls.enum_names:
        if name in ref.enums and enc.values.get(name) is not None and name not in bad:
            wrong = ref.enums[name] % U64 + 7
            out[0].append(
                Mutation(
                    f"wrong enum value: {name} = {wrong}",
                    [
                        (rf"\b({name})(\s*=\s*)[^,\n}}]+", rf"\g<1>\g<2>{wrong}"),
                        (rf"\b({name})\b(\s*)(?=[,}}])", rf"\g<1> = {wrong}\g<2>"),
                    ],
                    lambda rows, name=name: any(r.kind == "enum" and r.where == name for r in rows),
                )
            )
            if len(out[0]) >= 5:
                break

    # 2. a wrong argument type in a selector
    for m in explicit:
        sig = _checkable(ref, m)
        if not m.params or sig is None or sig.args.get(0) is None:
            continue
        first = m.selector.split(":")[0]
        new_type = _wrong_type(enc.encode(m.params[0]))
        out[1].append(
            Mutation(
                f"wrong argument type: {m.where} arg 1 -> {new_type}",
                [(rf"({METHOD_HEAD}{first}\s*:\s*)\([^)]*\)", rf"\g<1>({new_type})")],
                lambda rows, w=m.where: any(
                    r.kind == "type" and r.where.startswith(w) for r in rows
                ),
            )
        )
        if len(out[1]) >= 5:
            break

    # 3. a misspelled selector (on a protocol, where pyobjc's data is complete)
    for m in explicit:
        if ":" not in m.selector or _checkable(ref, m) is None:
            continue
        first = m.selector.split(":")[0]
        typo = first + "Typo"
        out[2].append(
            Mutation(
                f"misspelled selector: {m.selector} -> {typo}:...",
                [(rf"({METHOD_HEAD}){first}(\s*:)", rf"\g<1>{typo}\g<2>")],
                lambda rows, typo=typo: any(r.kind == "selector" and typo in r.stub for r in rows),
            )
        )
        if len(out[2]) >= 5:
            break

    # 4. (extra) a wrong return type: a method's, or a property's type
    for m in decls.methods:
        if m.container_kind != "protocol" or m.where in bad or m.params or m.ret == "void":
            continue
        sig = _checkable(ref, m)
        if sig is None or sig.ret is None:
            continue
        sel = m.selector
        new_type = _wrong_type(enc.encode(m.ret))
        if m.implicit:
            edit = (
                rf"^\s*@property\s*(?:\([^)]*\))?[^;]*?\b{sel}\s*;",
                f"@property(readonly) {new_type} {sel};",
            )
        else:
            edit = (rf"(^\s*[-+]\s*)\([^;]*?\)(\s*{sel}\b(?!\s*:))", rf"\g<1>({new_type})\g<2>")
        out[3].append(
            Mutation(
                f"wrong return type: {m.where} -> {new_type}",
                [edit],
                lambda rows, w=m.where: any(r.where == f"{w} return" for r in rows),
            )
        )
        if len(out[3]) >= 5:
            break
    return [group for group in out if group]


REQUIRED_MUTATIONS = 3


def self_test(ref: Reference, stubs: Path, clang: str) -> int:
    print(f"self-test on copies of {stubs}")
    base, decls, enc = analyse(ref, stubs, clang)
    if base.checked == 0:
        print("self-test: the unmodified stand-ins check nothing")
        return 1
    known = {(b.kind, b.where, b.stub) for b in base.rows}
    groups = mutations(ref, base, decls, enc)
    failures = 0
    for group in groups:
        for mut in group:
            with tempfile.TemporaryDirectory(prefix="mck-stubs-") as tmp:
                root = Path(tmp) / "stubs"
                shutil.copytree(stubs, root)
                if not mut.apply(root):
                    continue
                try:
                    res = run_check(ref, root, clang)
                except ToolError as exc:
                    print(f"  FAIL  {mut.desc}: the mutated stand-ins do not compile: {exc}")
                    failures += 1
                    break
                new = [r for r in res.rows if (r.kind, r.where, r.stub) not in known]
                if mut.caught(new):
                    shown = "; ".join(f"{r.where}: {r.stub} vs {r.ref}" for r in new[:2])
                    print(f"  ok    {mut.desc}  (caught: {shown})")
                else:
                    print(f"  FAIL  {mut.desc}: not caught")
                    failures += 1
                break
        else:
            print(f"  FAIL  {group[0].desc}: could not inject it (nor {len(group) - 1} others)")
            failures += 1
    if len(groups) < REQUIRED_MUTATIONS:
        print(
            f"self-test: only {len(groups)} of {REQUIRED_MUTATIONS} kinds of mistake could be made"
        )
        failures += 1
    caught = len(groups) - min(failures, len(groups))
    print(f"self-test: {caught} of {len(groups)} injected mistakes caught")
    return 1 if failures else 0


# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="pyobjc-framework-Metal .whl or unpacked directory")
    ap.add_argument("--stubs", type=Path, default=REPO / "tests" / "metal_stubs")
    ap.add_argument("--clang", default=os.environ.get("CLANG", "clang-14"))
    ap.add_argument("--self-test", action="store_true", help="inject mistakes, expect them caught")
    ap.add_argument(
        "--strict", action="store_true", help="also fail on class selectors pyobjc cannot verify"
    )
    args = ap.parse_args(argv)
    try:
        if not (args.stubs / "Metal" / "Metal.h").is_file():
            raise ToolError(f"{args.stubs}/Metal/Metal.h not found")
        ref = load_reference(args.wheel)
        if not ref.enums or not ref.nsobject:
            raise ToolError(f"{args.wheel}: no enum or selector data found")
        if args.self_test:
            return self_test(ref, args.stubs, args.clang)
        res = run_check(ref, args.stubs, args.clang)
    except ToolError as exc:
        print(f"metal_stubs_check: {exc}", file=sys.stderr)
        return 2
    print_result(res, ref, args.stubs)
    if res.checked == 0:
        print("nothing was checked", file=sys.stderr)
        return 1
    if res.rows or (args.strict and res.warnings):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
