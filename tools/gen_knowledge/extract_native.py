"""Native sources -> message format strings and symbols. Pure: bytes or text in, records out.

- C / C++ source: the format string of each logging macro call (NCCL's ``WARN(...)``,
  ``INFO(NCCL_INIT, ...)``), adjacent string literals joined, ``PRIu64``-style macros resolved.
- C++ streams and concatenations: Triton's ``LOG_INFO << "loading: " << id;``,
  ``LOG_MESSAGE(TRITONSERVER_LOG_INFO, (std::string("Stub path ") + p).c_str())``.
- Rust / Go source: ``tracing::warn!("...")`` / ``slog.Warn("...")`` / ``fmt.Errorf("...")``,
  ``slog.Info(fmt.Sprintf("...", ...))``.
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


def _string_after(text: str, pos: int, ends: str = ",)") -> tuple[str, int] | None:
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
        # a macro parameter pasted between literals ("Call to " name " failed") prints a string;
        # so does a macro name before the first (GGML_CUDA_NAME " error: %s\n")
        m = re.match(r"[A-Za-z_]\w*(?=\s*\")", text[i:])
        if m and (out or re.fullmatch(r"[A-Z][A-Z0-9_]*", m.group())):
            out.append("%s")
            i += m.end()
            continue
        break
    if not out or (i < len(text) and text[i] not in ends):
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
        fmt, end = got
        if fmt.strip() == "%s" and text.startswith(",", end):
            # llama.cpp's SRV_INF("%s", "server is entering sleeping state\n"): the text is the
            # literal argument, printed as it is
            lit = _string_after(text, end + 1)
            if lit is not None:
                fmt = lit[0].replace("%", "%%") + fmt.replace("%s", "", 1).strip(" ")
        line = text.count("\n", 0, m.start()) + 1
        out.append(NativeMessage(line, level, m.group(1), T.percent_tokens(fmt)))
    return out


# Triton (server / core / python_backend): LOG_INFO << "loading: " << id << ":" << v;
# LOG_MESSAGE(TRITONSERVER_LOG_INFO, (std::string("Stub path ") + path).c_str());
# TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "Stub process is not healthy.")
_STREAM_LEVELS = {"cerr": "warning", "LOG_INFO": "info", "LOG_WARNING": "warning", "LOG_ERROR": "error",
                  "LOG_VERBOSE": "debug", "LOG_FATAL": "error"}
_ARG_LEVELS = {"INFO": "info", "WARN": "warning", "ERROR": "error", "VERBOSE": "debug"}
_IGNORED_OPERANDS = re.compile(r"std::(endl|flush)|std::string\(\)")


def _operand_end(text: str, i: int) -> int:
    """The end of one C++ operand that is not a string literal: names, ``::``, ``.``, ``->``,
    calls and subscripts with balanced brackets, a leading ``*`` / ``!`` / ``&``."""
    n = len(text)
    while i < n and text[i] in "*!&":
        i += 1
    start = i
    while i < n:
        c = text[i]
        if c.isalnum() or c == "_" or c == ":" or c == ".":
            i += 1
        elif text.startswith("->", i):
            i += 2
        elif c in "([<" and i > start:
            if c == "<" and not re.match(r"<[\w:, ]*>", text[i:]):
                break  # a comparison, not template arguments
            close = {"(": ")", "[": "]", "<": ">"}[c]
            depth = 0
            while i < n:
                if text[i] == '"':
                    m = _C_STRING.match(text, i)
                    i = m.end() if m else i + 1
                    continue
                if text[i] == c:
                    depth += 1
                elif text[i] == close:
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        else:
            break
    return i if i > start else -1


def _concat(text: str, i: int, ops: tuple[str, ...], stop: str) -> tuple[list[T.Token], int] | None:
    """Operands joined by ``ops`` ('+' or '<<') up to ``stop`` (';' or ')') at depth 0: string
    literals are text, anything else a ``%s`` field. ``std::string(...)``, parentheses and a
    trailing ``.c_str()`` are seen through. None when the expression is not of that shape."""
    toks: list[T.Token] = []
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n\\":
            i += 1
        if text.startswith('"', i):
            got = _string_after(text, i, ",);+<.")
            if got is None:
                return None
            s, i = got[0], got[1]
            if "%" in s:
                return None  # would read back as a printf field
            toks.append(("lit", s))
        elif text.startswith("std::string(", i) or text.startswith("(", i):
            j = i + (len("std::string(") if text[i] != "(" else 1)
            inner = _concat(text, j, ("+",), ")")
            if inner is None:
                return None
            toks += inner[0]
            i = inner[1] + 1
            while text.startswith(".c_str()", i) or re.match(r"\s*\.c_str\(\)", text[i:]):
                i = text.index(".c_str()", i) + len(".c_str()")
        else:
            j = _operand_end(text, i)
            if j < 0:
                return None
            operand = text[i:j]
            if not _IGNORED_OPERANDS.fullmatch(operand):
                toks.append(("ph", "%s"))
            i = j
        while i < n and text[i] in " \t\r\n":
            i += 1
        op = next((o for o in ops if text.startswith(o, i)), None)
        if op is None:
            break
        i += len(op)
    if i >= n or text[i] != stop:
        return None
    return T._merge(toks), i


def stream_messages(text: str) -> list[NativeMessage]:
    """Triton's logging: ``LOG_INFO << ...;`` (LOG_WARNING, LOG_ERROR, LOG_VERBOSE(n)), the
    backend API's ``LOG_MESSAGE(TRITONSERVER_LOG_*, msg)`` and the errors a backend returns,
    ``TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_*, msg)``; and ``std::cerr << ...;`` (ggml's
    Vulkan backend; no level of its own: read as a warning). Each streamed or concatenated
    expression that is not a literal becomes a ``%s`` field."""
    out: list[NativeMessage] = []
    rx = re.compile(r"(?<![\w.>])(?:(LOG_INFO|LOG_WARNING|LOG_ERROR|LOG_FATAL|LOG_VERBOSE\s*\(\s*\d+\s*\)|std::cerr)"
                    r"\s*<<|(LOG_MESSAGE|TRITONSERVER_ErrorNew)\s*\(\s*TRITONSERVER_(?:LOG|ERROR)_(\w+)\s*,)")
    for m in rx.finditer(text):
        if m.group(1):
            macro = re.sub(r"\s|\(.*", "", m.group(1)).replace("std::cerr", "cerr")
            level = _STREAM_LEVELS[macro]
            got = _concat(text, m.end(), ("<<",), ";")
        else:
            macro = m.group(2)
            level = _ARG_LEVELS.get(m.group(3), "error") if macro == "LOG_MESSAGE" else "error"
            got = _concat(text, m.end(), ("+",), ")")
        if got is None or not any(k == "lit" for k, _ in got[0]):
            continue
        out.append(NativeMessage(text.count("\n", 0, m.start()) + 1, level, macro, got[0]))
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
    # a string constant the format names: const msg = "%s part %d stalled; retrying. ..."
    consts = {c.group(1): c.group(2) for c in reversed(list(re.finditer(
        r"\b(?:const\s+)?([A-Za-z_]\w*)\s*:?=\s*\"((?:[^\"\\\n]|\\.)*)\"\s*$", text, re.M)))}
    for m in re.finditer(r"\b(slog\.(Info|Warn|Error|Debug)|fmt\.Errorf|errors\.New|log\.Printf|"
                         r"log\.Fatalf)\s*\(\s*(fmt\.Sprintf\(\s*)?(?:\"((?:[^\"\\]|\\.)*)\"|"
                         r"([A-Za-z_]\w*)\s*,)", text):
        fn = m.group(1)
        if m.group(5) is not None:  # a named constant: only inside slog.X(fmt.Sprintf(NAME, ...))
            if not m.group(3) or m.group(5) not in consts:
                continue
        if m.group(3):  # slog.Info(fmt.Sprintf("%s part %d attempt %d failed: %v", ...))
            fmt = _unescape_c(m.group(4) if m.group(4) is not None else consts[m.group(5)])
            out.append(NativeMessage(text.count("\n", 0, m.start()) + 1,
                                     {"Info": "info", "Warn": "warning", "Error": "error",
                                      "Debug": "debug"}.get(m.group(2) or "", "info"),
                                     fn, T.percent_tokens(fmt)))
            continue
        level = {"Info": "info", "Warn": "warning", "Error": "error", "Debug": "debug"}.get(
            m.group(2) or "", "error" if "rr" in fn or "Fatal" in fn else "info")
        fmt = _unescape_c(m.group(4))
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
