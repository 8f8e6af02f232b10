"""Native sources -> message format strings and symbols. Pure: bytes or text in, records out.

- C / C++ source: the format string of each logging macro call (NCCL's ``WARN(...)``,
  ``INFO(NCCL_INIT, ...)``), adjacent string literals joined, ``PRIu64``-style macros resolved.
- Rust / Go source: ``tracing::warn!("...")`` / ``slog.Warn("...")`` / ``fmt.Errorf("...")``.
- Binaries (.so): printable runs as ``strings`` prints them, and the exported symbol names from
  the ELF dynamic symbol table, C++ ones reduced to their qualified name as a debugger prints it.
- C headers: the functions a header declares (CUDA runtime / driver API).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from tools.gen_knowledge import templates as T


@dataclass
class NativeMessage:
    line: int
    level: str
    macro: str
    tokens: list[T.Token]


_C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_C_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r", "0": ""}


def _unescape_c(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: _C_ESCAPES.get(m.group(1), m.group(1)), s)


def _string_after(text: str, pos: int) -> tuple[str, int] | None:
    """The format string starting at ``pos``: adjacent literals and PRI macros joined, up to
    the first ',' or ')' outside them. None when the argument is not a literal."""
    out: list[str] = []
    i = pos
    while True:
        while i < len(text) and text[i] in " \t\r\n\\":
            i += 1
        if text.startswith('"', i):
            m = _C_STRING.match(text, i)
            if not m:
                return None
            out.append(_unescape_c(m.group(1)))
            i = m.end()
            continue
        m = re.match(r"PRI([diouxX])\w*", text[i:])
        if m and out:
            out.append(("l" if m.group(1) in "diouxX" else "") + m.group(1))
            i += m.end()
            continue
        # a macro parameter pasted between literals ("Call to " name " failed") prints a string
        m = re.match(r"[A-Za-z_]\w*(?=\s*\")", text[i:])
        if m and out:
            out.append("%s")
            i += m.end()
            continue
        break
    if not out or (i < len(text) and text[i] not in ",)"):
        return None
    return "".join(out), i


def c_messages(text: str, macros: dict[str, tuple[str, int]]) -> list[NativeMessage]:
    """``macros``: name -> (level, index of the format argument). ``WARN("fmt", ...)`` is
    ("warning", 0); ``INFO(NCCL_INIT, "fmt", ...)`` is ("info", 1)."""
    out: list[NativeMessage] = []
    names = "|".join(sorted(map(re.escape, macros)))
    for m in re.finditer(rf"(?<![\w.>])({names})\s*\(", text):
        level, argi = macros[m.group(1)]
        pos = m.end()
        for _ in range(argi):  # skip leading arguments (a subsystem mask has no commas inside)
            j = text.find(",", pos)
            if j < 0 or j - pos > 200:
                break
            pos = j + 1
        got = _string_after(text, pos)
        if got is None:
            continue
        fmt = got[0]
        line = text.count("\n", 0, m.start()) + 1
        out.append(NativeMessage(line, level, m.group(1), T.percent_tokens(fmt)))
    return out


def rust_messages(text: str) -> list[NativeMessage]:
    """tracing / log macros: ``warn!("...{}", x)``, ``tracing::error!("...")``, and
    ``tracing::info!(field = x, "...")`` (the message is the first string literal)."""
    out: list[NativeMessage] = []
    for m in re.finditer(r"(?<![\w])(?:tracing::|log::)?(error|warn|info|debug)!\s*\(", text):
        rest = text[m.end(): m.end() + 600]
        sm = re.search(r'"((?:[^"\\]|\\.)*)"', rest)
        depth_ok = sm is not None and rest[: sm.start()].count(")") == 0
        if not depth_ok:
            continue
        fmt = _unescape_c(sm.group(1))
        level = {"warn": "warning"}.get(m.group(1), m.group(1))
        out.append(NativeMessage(text.count("\n", 0, m.start()) + 1, level, m.group(1) + "!",
                                 T.brace_tokens(fmt)))
    return out


def go_messages(text: str) -> list[NativeMessage]:
    """slog.Info("msg", k, v) (literal message; the attributes follow it as key=value) and
    fmt.Errorf / errors.New / log.Printf format strings."""
    out: list[NativeMessage] = []
    for m in re.finditer(r"\b(slog\.(Info|Warn|Error|Debug)|fmt\.Errorf|errors\.New|log\.Printf|"
                         r"log\.Fatalf)\s*\(\s*\"((?:[^\"\\]|\\.)*)\"", text):
        fn = m.group(1)
        level = {"Info": "info", "Warn": "warning", "Error": "error", "Debug": "debug"}.get(
            m.group(2) or "", "error" if "rr" in fn or "Fatal" in fn else "info")
        fmt = _unescape_c(m.group(3))
        toks = T.literal_tokens(fmt) if fn.startswith("slog") or fn == "errors.New" else T.percent_tokens(fmt)
        out.append(NativeMessage(text.count("\n", 0, m.start()) + 1, level, fn, toks))
    return out


_PRINTABLE = re.compile(rb"[\x20-\x7e\t]{%d,}")


def printable_strings(data: bytes, min_len: int = 8) -> list[str]:
    """What ``strings -n min_len`` prints: every run of printable ASCII."""
    return [m.group().decode("ascii") for m in re.finditer(_PRINTABLE.pattern % min_len, data)]


def elf_dynamic_symbols(data: bytes) -> list[str]:
    """Names in the ELF64 little-endian .dynsym of a shared object that are defined there (what
    the object exports), in table order."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: list[str] = []
    for _name, typ, _fl, _addr, off, size, link, _info, _al, entsize in secs:
        if typ != 11 or not entsize:  # SHT_DYNSYM
            continue
        stroff, strsize = secs[link][4], secs[link][5]
        strtab = data[stroff: stroff + strsize]
        for k in range(size // entsize):
            st_name, st_info, _o, st_shndx = struct.unpack_from("<IBBH", data, off + k * entsize)
            if st_shndx == 0 or (st_info & 0xF) != 2:  # undefined, or not a function
                continue
            end = strtab.find(b"\0", st_name)
            out.append(strtab[st_name:end].decode("ascii", "replace"))
    return out


def qualified_name(mangled: str) -> str | None:
    """``_ZN4c10d8TCPStore6doWaitE...`` -> ``c10d::TCPStore::doWait``: the nested name of an
    Itanium-mangled symbol, as gdb and py-spy print it before the argument list. Templates,
    substitutions and special names give None (not needed for the wait points we select);
    a plain C name comes back as it is."""
    if not mangled.startswith("_Z"):
        return mangled if re.fullmatch(r"[A-Za-z_]\w*", mangled) else None
    m = re.match(r"_ZN(?:[rVK]*)(?:St)?", mangled)
    if not m:
        return None
    i, parts = m.end(), []
    if mangled[2:].startswith("NSt"):
        parts.append("std")
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        parts.append(mangled[j: j + n])
        i = j + n
        if i < len(mangled) and mangled[i] == "B":  # abi tag: B5cxx11
            k = i + 1
            while k < len(mangled) and mangled[k].isdigit():
                k += 1
            i = k + int(mangled[i + 1:k] or 0)
    if i < len(mangled) and mangled[i] == "C" or i < len(mangled) and mangled[i] == "D":
        ctor = mangled[i] == "C"
        parts.append(("" if ctor else "~") + parts[-1])
        i += 2
    if i >= len(mangled) or mangled[i] != "E" or len(parts) < 2:
        return None
    return "::".join(parts)


def header_functions(text: str, pattern: str) -> list[tuple[str, int]]:
    """(function, line) for each declaration in a C header whose name matches ``pattern``:
    ``extern __host__ cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream);``."""
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    rx = re.compile(rf"^[^#/\n]*?\b(?:CUDAAPI|CUDARTAPI|ncclResult_t)\s+({pattern})\s*\(", re.M)
    for m in rx.finditer(text):
        name = m.group(1)
        if name not in seen:
            seen.add(name)
            out.append((name, text.count("\n", 0, m.start(1)) + 1))
    return out
