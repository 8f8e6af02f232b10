"""Split pasted text into segments and name each segment's kind from its content, whatever the
file is called. One paste may hold several kinds (a server log with a py-spy dump in the middle).

Kinds: ``pyspy-text``, ``pyspy-json``, ``faulthandler``, ``traceback``, ``log``, ``kernel``,
``nvidia-smi``, ``nvidia-smi-q``, ``ps``, ``env``, ``collect-env``, ``gdb`` (backtraces),
``nvidia-smi-topo`` (``nvidia-smi topo -m``), ``command`` (a launch command); a whole document that is a
saved snapshot or analysis JSON is ``snapshot`` / ``analysis`` (the CLI routes those).

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.redact and
hangdoctor.snapshot.loglines (the shape of a log line).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

from hangdoctor import bounded
from hangdoctor.parsers import faulthandler as fh
from hangdoctor.parsers import gdb
from hangdoctor.parsers import pyspy_text as pt
from hangdoctor.parsers import traceback as tb
from hangdoctor.parsers.env import ENV_LINE
from hangdoctor.parsers.ps import _split_row, header_columns
from hangdoctor.parsers.pyspy_json import is_pyspy_json, iter_json_documents
from hangdoctor.snapshot.loglines import MAX_LINE_CHARS, split_prefix

KINDS = (
    "pyspy-text",
    "pyspy-json",
    "faulthandler",
    "traceback",
    "log",
    "kernel",
    "nvidia-smi",
    "nvidia-smi-q",
    "ps",
    "env",
    "collect-env",
    "gdb",
    "nvidia-smi-topo",
    "command",
    "snapshot",
    "analysis",
)


@dataclass
class Segment:
    """A run of lines of one kind; ``start`` is the 0-based index of its first line."""

    kind: str
    start: int
    lines: list = field(default_factory=list)
    flavour: Optional[str] = None  # for logs: vllm | sglang | tgi | torch | nccl
    # a dump written through a per-process log prefix ("[rank3]: Traceback ...",
    # "(EngineCore pid=12) ERROR ... Thread 5 (idle)"): the lines as written, and who wrote them
    raw: Optional[list] = None
    prefix_pid: Optional[int] = None
    prefix_rank: Optional[int] = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def sniff_json_document(text: str, name: str = "the document") -> Optional[str]:
    """``"snapshot"`` for a saved snapshot JSON (has ``schema_version``), ``"analysis"`` for an
    analysis JSON (has ``analysis_version``), else None. A document that would decode into
    more than bounded's caps raises bounded.TooLarge before anything is decoded."""
    s = text.lstrip("\ufeff \t\r\n")
    if not s.startswith("{"):
        return None
    bounded.check_json_text(s, name)
    try:
        value, _end = json.JSONDecoder().raw_decode(s)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if "analysis_version" in value:
        return "analysis"
    if "schema_version" in value:
        return "snapshot"
    return None


_KERNEL = re.compile(
    r"^(?:<\d+>)?\[\s*\d+\.\d+\]|^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]|"
    r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: |^\d{4}-\d\d-\d\dT\S+ \S+ kernel: |^kernel: |"
    r"^(?:\[[^\]]*\]\s*)?NVRM: |"
    # dmesg -H: "[  +0.000316] ..." and "[Jan 2 10:00] ..."; syslog "host kern: ..." / "kern.warn"
    r"^\[\s*\+\d+\.\d+\]|^\[[A-Z][a-z]{2}\s*\d{1,2} \d\d:\d\d(?::\d\d)?\]|"
    r"^(?:\w{3} [ \d]\d \d\d:\d\d:\d\d )?\S+ kern(?:el)?(?:\.\w+)?: "
)
# "$ ", "# ", "(venv) user@host:~$ " before a command
PROMPT = re.compile(r"^\s*(?:\([^)]{1,40}\)\s*)?(?:[\w.-]+@[\w.-]+:[^$#\s]*\s*)?[$#>]\s?")
_COMMAND = re.compile(
    r"^\s*(?:sudo\s+)?(?:(?:[A-Z_][A-Z0-9_]*=\S*\s+)*)(?:vllm serve|python3?(?:\.\d+)? -m (?:vllm|sglang)\S*|"
    r"sglang serve|docker run|nvidia-docker run|podman run|torchrun|deepspeed|text-generation-launcher|"
    r"trtllm-serve|tritonserver|lmdeploy serve|ollama (?:serve|run)|llama-server|mpirun|srun)\b"
)
_TOPO_HEAD = re.compile(r"^\s+GPU0(?:\s+(?:GPU\d+|NIC\d+|mlx\S+))*\s+(?:CPU Affinity|NUMA|GPU1)")
_TOPO_ROW = re.compile(r"^\s*(?:GPU\d+|NIC\d+|mlx\S+)\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\b")
# a `ps aux` row without its header (people grep ps): USER PID %CPU %MEM VSZ RSS TTY STAT START TIME CMD
_PS_AUX_ROW = re.compile(
    r"^\S+\s+\d+\s+\d+(?:\.\d+)?\s+\d+(?:\.\d+)?\s+\d+\s+\d+\s+\S+\s+[RSDZTIWXP][<NLsl+]*\s+\S+\s+\d+:\d+\s+\S"
)
PS_AUX_HEADER = "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"
_NVSMI_Q_START = re.compile(r"^=+NVSMI LOG=+\s*$|^Attached GPUs\s+:\s*\d")
_NVSMI_Q_KV = re.compile(r"^\S[^:]*?\s+:\s?.*$")
_GPU_HEAD = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\s*$")
_DATE_LINE = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\s*$")
_COLLECT_START = re.compile(r"^\s*Collecting environment information|^\s*PyTorch version\s*:")
_COLLECT_END = re.compile(r"^\s*```|</details>")
_FLAVOURS = [
    (
        "vllm",
        re.compile(
            r"\((?:EngineCore|VllmWorker|APIServer|RayWorkerWrapper|Worker_TP)|vllm|Avg prompt throughput"
        ),
    ),
    ("sglang", re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]{2}\d+)+\]|sglang", re.M)),
    ("tgi", re.compile(r"text_generation_(?:launcher|router|server)|shard-manager")),
    ("torch", re.compile(r"ProcessGroupNCCL|torch\.distributed|c10d|\[rank\d+\]:")),
    ("nccl", re.compile(r"NCCL (?:INFO|WARN)")),
]


def _flavour(lines: list) -> Optional[str]:
    sample = "\n".join(lines[:3000])[:400_000]
    for name, pat in _FLAVOURS:
        if pat.search(sample):
            return name
    return None


def _cap(line: str) -> str:
    line = line.replace("\x00", "")
    if len(line) > MAX_LINE_CHARS:
        from hangdoctor.redact import cut_line  # never inside a word: half a token leaks

        return cut_line(line, MAX_LINE_CHARS)
    return line


def _is_nvsmi_table_start(lines: list, i: int) -> bool:
    line = lines[i]
    if line.startswith("|") and "NVIDIA-SMI" in line:
        return True
    return line.startswith("+--") and i + 1 < len(lines) and "NVIDIA-SMI" in lines[i + 1]


def _block_start(lines: list, i: int) -> Optional[str]:
    line = lines[i]
    if not line:
        return None
    c = line[0]
    if (c == "#" or c in " \t") and gdb.FRAME.match(line) and i + 1 < len(lines) and (
        gdb.FRAME.match(lines[i + 1]) or "excerpt truncated" in lines[i + 1] or gdb.is_wrapped(line)
    ):
        return "gdb"
    if c == "T" and gdb.THREAD.match(line):
        return "gdb"
    if c in " \t" and _TOPO_HEAD.match(line):
        return "nvidia-smi-topo"
    if _PS_AUX_ROW.match(line):
        return "ps-rows"
    bare = line.lstrip("` ")
    if _COMMAND.match(PROMPT.sub("", bare, count=1) if bare[:1] in "$#>(" or "@" in bare[:60] else bare):
        return "command"
    if c in "PTR" or "py-spy" in line or "Pyspy dump" in line or "Python v" in line:
        if pt.looks_like_pyspy_line(line):
            return "pyspy-text"
    if pt.HEADERLESS_FRAME.match(line) and i + 2 < len(lines) and all(
            pt.HEADERLESS_FRAME.match(lines[k]) for k in (i + 1, i + 2)):
        return "pyspy-text"  # three frames in a row without a header: a pasted stack
    if c == "F" and fh.FRAME.match(line) and i + 2 < len(lines) and all(
            fh.FRAME.match(lines[k]) for k in (i + 1, i + 2)):
        return "faulthandler"  # three faulthandler frames in a row, their thread line not pasted
    if c in "TCSF" and (
        fh.THREAD_HEAD.match(line) or fh.STACK_HEAD.match(line) or fh.FATAL.match(line)
    ):
        return "faulthandler"
    if "Traceback" in line and tb.START.match(line):
        return "traceback"
    if c in "+|" and _is_nvsmi_table_start(lines, i):
        return "nvidia-smi"
    if c in "=A" and _NVSMI_Q_START.match(line):
        return "nvidia-smi-q"
    if c == "G" and _GPU_HEAD.match(line) and i + 1 < len(lines) and "Product Name" in lines[i + 1]:
        return "nvidia-smi-q"
    if "PID" in line and header_columns(line):
        return "ps"
    if ("Collecting" in line or "PyTorch" in line) and _COLLECT_START.match(line):
        return "collect-env"
    return None


def _next_nonblank(lines: list, i: int) -> Optional[str]:
    for j in range(i, min(len(lines), i + 5)):
        if lines[j].strip():
            return lines[j]
    return None


def _block_end(kind: str, lines: list, i: int) -> int:
    """Index one past the last line of the block of ``kind`` that starts at ``i``."""
    n = len(lines)
    j = i + 1
    if kind == "gdb":
        while j < n:
            line = lines[j]
            nxt = lines[j + 1] if j + 1 < n else ""
            if gdb.FRAME.match(line) or gdb.THREAD.match(line) or "excerpt truncated" in line:
                j += 1
            elif not line.strip() and (gdb.FRAME.match(nxt) or gdb.THREAD.match(nxt)):
                j += 1
            elif line.strip() and gdb.is_wrapped(lines[j - 1]):
                j += 1  # a frame the terminal wrapped mid-word
            else:
                break
        return j
    if kind == "nvidia-smi-topo":
        while j < n and (_TOPO_ROW.match(lines[j]) or (lines[j].strip() == "" and j + 1 < n and _TOPO_ROW.match(lines[j + 1]))):
            j += 1
        return j
    if kind == "ps-rows":
        while j < n and _PS_AUX_ROW.match(lines[j]):
            j += 1
        return j
    if kind == "command":
        # shell continuations: a line ending in "\" goes on
        while j < n and lines[j - 1].rstrip().endswith("\\"):
            j += 1
        return j
    if kind == "pyspy-text":
        while j < n:
            line = lines[j]
            if not line.strip():
                nxt = _next_nonblank(lines, j)
                if nxt is None or not (nxt[:1] in " \t" or pt.looks_like_pyspy_line(nxt)):
                    return j
            elif not (
                line[:1] in " \t"
                or pt.looks_like_pyspy_line(line)
                or line.startswith("Error:")
                or pt.BARE_FRAME.match(line)
                or pt.HEADERLESS_FRAME.match(line)
            ):
                return j
            j += 1
        return j
    if kind == "faulthandler":
        while j < n:
            line = lines[j]
            if line.startswith("Extension modules:"):
                return j + 1
            if not line.strip():
                nxt = _next_nonblank(lines, j)
                if nxt is None or not (
                    fh.THREAD_HEAD.match(nxt)
                    or fh.STACK_HEAD.match(nxt)
                    or nxt.startswith(("Extension", "Current thread"))
                ):
                    return j
            elif not (
                line[:1] in " \t"
                or fh.THREAD_HEAD.match(line)
                or fh.STACK_HEAD.match(line)
                or line.startswith(("Python runtime state", "Current thread's C stack"))
            ):
                return j
            j += 1
        return j
    if kind == "traceback":
        done = False
        while j < n:
            line = lines[j]
            if not line.strip():
                if done:
                    nxt = _next_nonblank(lines, j)
                    if nxt is None or not tb.CHAIN.match(nxt):
                        return j
                j += 1
                continue
            if tb.CHAIN.match(line) or tb.START.match(line):
                done = False
            elif line[:1] not in " \t":
                if done:
                    return j
                done = True  # the exception line
            j += 1
        return j
    if kind == "nvidia-smi":
        while j < n:
            line = lines[j]
            if line[:1] in "+|":
                j += 1
                continue
            if not line.strip():
                nxt = _next_nonblank(lines, j)
                if nxt is not None and nxt[:1] in "+|":
                    j += 1
                    continue
            return j
        return j
    if kind == "nvidia-smi-q":
        while j < n:
            line = lines[j]
            if line.strip() and not (
                line[:1] in " \t"
                or _GPU_HEAD.match(line)
                or _NVSMI_Q_KV.match(line[:300])
                or line.startswith("=")
            ):
                return j
            j += 1
        return j
    if kind == "ps":
        cols = header_columns(lines[i]) or []
        while j < n:
            line = lines[j]
            if line.strip() and _split_row(line, cols) is None and not header_columns(line):
                return j
            j += 1
        return j
    if kind == "collect-env":
        blanks = 0
        while j < n:
            line = lines[j]
            if _COLLECT_END.search(line):
                return j
            if line.strip():
                blanks = 0
                if _block_start(lines, j) not in (None, "collect-env", "nvidia-smi-topo", "command"):
                    return j
            else:
                blanks += 1
                if blanks >= 3:
                    return j
            j += 1
        return j
    return j


def _line_kind(line: str) -> Optional[str]:
    if not line.strip():
        return None
    if _KERNEL.match(line):
        return "kernel"
    if (
        "=" in line
        and ENV_LINE.match(line)
        and " "
        not in line.split("=", 1)[0].strip().replace("export ", "").replace("declare -x ", "")
    ):
        return "env"
    return "log"


JSON_FAILURES_MAX = 200  # lines that looked like JSON and were not: past that, no more tries


def _json_candidate(line: str) -> bool:
    s = line.strip()
    return s in ("[", "{") or s.startswith(("[{", '{"', "[ {"))


def split_segments(text: str) -> list[Segment]:
    """Split one pasted text into segments of one kind each, in order."""
    try:
        whole = sniff_json_document(text)
    except bounded.TooLarge:
        whole = None  # read as lines, each capped, like any other paste
    if whole:
        return [Segment(whole, 0, [])]
    text = text.lstrip("\ufeff")
    lines = [_cap(x.rstrip("\r")) for x in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    segs: list[Segment] = []
    joined: Optional[str] = None
    offsets: list = []
    i = 0
    n = len(lines)
    # JSON is decoded in place (at an offset of the joined text, never a slice of it: a
    # JSON-lines log of 8 MB took 16.7 s when every "{" line copied the rest of the text), not
    # again inside a document already decoded, and given up on after JSON_FAILURES_MAX failures.
    json_failures = 0
    decoded_until = -1
    while i < n:
        line = lines[i]
        if _json_candidate(line) and json_failures < JSON_FAILURES_MAX:
            if joined is None:  # only built when a paste has JSON in it
                joined = "\n".join(lines)
                offsets = [0]
                for x in lines:
                    offsets.append(offsets[-1] + len(x) + 1)
            docs = []
            if offsets[i] >= decoded_until:
                # one document first: a big non-py-spy JSON must not be re-decoded at every line
                first = iter_json_documents(joined, limit=1, start=offsets[i])
                if not first:
                    json_failures += 1
                else:
                    decoded_until = first[0][2]
                    if is_pyspy_json(first[0][0]):
                        docs = iter_json_documents(joined, limit=1000, start=offsets[i])
            if docs and all(is_pyspy_json(v) for v, _s, _e in docs):
                j = i + joined.count("\n", offsets[i], docs[-1][2]) + 1
                segs.append(Segment("pyspy-json", i, lines[i:j]))
                i = j
                continue
        kind = _block_start(lines, i)
        if kind is None and line[:1] in "([":
            seg = _prefixed_dump(lines, i)
            if seg is not None:
                segs.append(seg)
                i = seg.start + len(seg.lines)
                continue
        if kind:
            if (
                kind == "pyspy-text"
                and pt.SGLANG_HEAD.search(line)
                and not line.startswith("Pyspy")
            ):
                _add_line(segs, "log", i, line)  # the watchdog line is a log line too
            j = _block_end(kind, lines, i)
            if kind == "ps-rows":  # a grep of ps: give the rows ps aux's header
                segs.append(Segment("ps", i, [PS_AUX_HEADER] + lines[i:j]))
            else:
                segs.append(Segment(kind, i, lines[i:j]))
            i = j
            continue
        _add_line(segs, _line_kind(line), i, line)
        i += 1
    segs = _tidy(segs)
    last_flavour = None
    for s in segs:
        if s.kind == "log":
            s.flavour = _flavour(s.lines) or last_flavour
            last_flavour = s.flavour
    return segs


_DUMP_KINDS = ("pyspy-text", "faulthandler", "traceback", "gdb")


def _prefixed_dump(lines: list, i: int) -> Optional[Segment]:
    """A stack dump whose every line carries one writer's log prefix: the dump without the
    prefixes (``lines``), the lines as written (``raw``) and the writer's pid / rank."""
    first = split_prefix(lines[i])
    if first.rest == lines[i] or (first.pid is None and first.rank is None):
        return None
    plain: list = []
    j = i
    while j < len(lines) and j - i < 20000:
        p = split_prefix(lines[j])
        if p.rest == lines[j] or (p.pid, p.rank) != (first.pid, first.rank):
            break  # another writer, or no prefix: the dump (if any) ended
        plain.append(p.rest)
        j += 1
    kind = _block_start(plain, 0)
    if kind not in _DUMP_KINDS:
        return None
    end = _block_end(kind, plain, 0)
    return Segment(kind, i, plain[:end], raw=lines[i : i + end], prefix_pid=first.pid,
                   prefix_rank=first.rank)


def _add_line(segs: list, kind: Optional[str], i: int, line: str) -> None:
    if kind is None:  # blank: belongs to whatever came before
        if segs:
            segs[-1].lines.append(line)
        return
    if segs and segs[-1].kind == kind and segs[-1].start + len(segs[-1].lines) == i:
        segs[-1].lines.append(line)
    else:
        segs.append(Segment(kind, i, [line]))


def _tidy(segs: list) -> list:
    """A lone env-looking line inside a log is a log line; merge neighbours of one kind."""
    has_other = any(s.kind not in ("env",) for s in segs)
    for s in segs:
        # a prompt line alone ("$ py-spy dump --pid 1 --json" before a JSON dump) is no dump
        if s.kind == "pyspy-text" and not any(
            pt.THREAD.match(x) or pt.PROCESS.match(x) or pt.LABELLED_THREAD.match(x) for x in s.lines
        ) and sum(1 for x in s.lines if pt.HEADERLESS_FRAME.match(x)) < 3:
            s.kind = "log"
        if s.kind == "env" and has_other and sum(1 for x in s.lines if x.strip()) < 2:
            s.kind = "log"
    out: list = []
    for s in segs:
        # `nvidia-smi` prints the date on the line above its table
        if (
            s.kind == "nvidia-smi"
            and out
            and out[-1].kind == "log"
            and _DATE_LINE.match(out[-1].lines[-1] if out[-1].lines else "")
        ):
            date = out[-1].lines.pop()
            s.lines.insert(0, date)
            s.start -= 1
            if not any(x.strip() for x in out[-1].lines):
                out.pop()
        if (
            out
            and out[-1].kind == s.kind
            and s.kind in ("log", "kernel", "env")
            and (out[-1].start + len(out[-1].lines) == s.start)
        ):
            out[-1].lines.extend(s.lines)
        else:
            out.append(s)
    return out


def detect_kinds(text: str) -> list[str]:
    """The distinct kinds found in a text, in order of first appearance."""
    seen: list[str] = []
    for s in split_segments(text):
        if s.kind not in seen:
            seen.append(s.kind)
    return seen
