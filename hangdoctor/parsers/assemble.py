"""Join pasted evidence (any mix of kinds, from any number of files) into ONE snapshot dict with
``origin: "pasted"``, so the same checks run on it as on a live snapshot (SCHEMA.md).

    from hangdoctor.parsers.assemble import analyze_inputs, read_input
    snap = analyze_inputs([read_input("ticket.txt"), read_input("-")])

Timing fields are never invented: pasted processes carry what the paste said, nothing more.
Everything is redacted (``hangdoctor.redact``) before it is returned.

Layer: parsers; may import: the standard library, hangdoctor (its version), hangdoctor.errors,
hangdoctor.redact, hangdoctor.parsers and hangdoctor.snapshot.loglines.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
from typing import BinaryIO, Optional

from hangdoctor import __version__
from hangdoctor.errors import InputError
from hangdoctor.parsers.collect_env import parse_collect_env
from hangdoctor.parsers.detect import Segment, split_segments
from hangdoctor.parsers.env import parse_env
from hangdoctor.parsers.faulthandler import parse_faulthandler
from hangdoctor.parsers.frames import PastedDump, rank_from_text, role_from_text
from hangdoctor.parsers.gdb import parse_gdb
from hangdoctor.parsers.nvidia_smi import parse_nvidia_smi_q, parse_nvidia_smi_table
from hangdoctor.parsers.prose import is_document, is_report, split_context, split_prose
from hangdoctor.parsers.ps import parse_ps
from hangdoctor.parsers.pyspy_json import parse_pyspy_json
from hangdoctor.parsers.pyspy_text import parse_pyspy_text
from hangdoctor.parsers.traceback import dumps_from_tracebacks, parse_tracebacks
from hangdoctor.parsers.unwrap import unwrap
from hangdoctor.redact import redact_obj

# nvidia-smi that did not answer or could not reach a GPU, as people paste it or describe it
_SMI_TIMEOUT = re.compile(
    r"(?i)nvidia-smi\b.{0,40}\b(?:blocked|blocks|hangs?|hung|stuck|freezes|does not return|"
    r"never returns|not responding|timed out)"
)
_SMI_FAILED = re.compile(
    r"Unable to determine the device handle|No devices were found|Failed to initialize NVML|"
    r"GPU is lost|Unable to communicate with the NVIDIA driver|NVIDIA-SMI has failed"
)
MAX_INPUT_BYTES = 64 * 1024 * 1024
STREAM_MAX_BYTES = 1024 * 1024 * 1024  # stdin read beyond this is given up on (endless producer)
FIRST_DATA_TIMEOUT_S = 3.0  # a FIFO that no one writes to
STREAM_TIMEOUT_S = 60.0  # a FIFO / device that trickles
LOG_TAIL_LINES = 5000
KERNEL_LINES = 5000
MAX_SAMPLES_PER_PID = 20
PASTED_TEXT_LINES = 20000  # raw lines kept per input for the knowledge rules
PASTED_LINE_CHARS = 4000  # of each: a rule's evidence sits at the start of a line
MAX_SYNTHETIC = 64  # processes of unknown pid (faulthandler, tracebacks) kept from one run

# family -> (segment kinds that feed it, the command that would produce it)
FAMILIES = {
    "stacks": (
        ("pyspy-text", "pyspy-json", "faulthandler", "traceback", "gdb"),
        "py-spy dump --pid PID (on each worker; add --native when a GPU wait is suspected)",
    ),
    "log": (
        ("log",),
        "the server's log, last ~500 lines (journalctl -u SERVICE -n 500, docker logs --tail 500 CONTAINER)",
    ),
    "kernel_log": (("kernel",), "sudo dmesg -T | tail -n 300 (Xid, OOM killer lines)"),
    "gpus": (
        ("nvidia-smi", "nvidia-smi-q"),
        "nvidia-smi (or nvidia-smi -q for ECC / throttle detail)",
    ),
    "processes": (("ps",), "ps auxf (and ps -eLo pid,tid,stat,wchan:32,comm for wait channels)"),
    "env": (("env",), "tr '\\0' '\\n' < /proc/PID/environ (of one worker)"),
    "versions": (
        ("collect-env",),
        "python collect_env.py (vLLM) or python -m torch.utils.collect_env",
    ),
}


class ReadText(str):
    """The text of one input; ``notes`` says what reading it had to do (cut, re-decode)."""

    notes: tuple = ()


def _decode(data: bytes) -> tuple[str, list[str]]:
    notes: list[str] = []
    if data.startswith(b"\xff\xfe") or data.startswith(b"\xfe\xff"):
        # PowerShell's ">" writes UTF-16
        text = data.decode("utf-16", "replace")
        notes.append("decoded as UTF-16")
    else:
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            # mixed encodings: decode line by line, latin-1 for lines that are not UTF-8
            parts = []
            bad = 0
            for line in data.split(b"\n"):
                try:
                    parts.append(line.decode("utf-8"))
                except UnicodeDecodeError:
                    bad += 1
                    parts.append(line.decode("latin-1"))
            text = "\n".join(parts)
            notes.append(f"{bad} line(s) were not UTF-8 and were read as latin-1")
    if "\x00" in text:
        text = text.replace("\x00", "")
        notes.append("NUL bytes removed")
    text = text.replace("\r\n", "\n")
    return text, notes


def _read_tail(f: BinaryIO, size: Optional[int]) -> tuple[bytes, bool]:
    """Read at most the last MAX_INPUT_BYTES of a regular file or a blocking stream (stdin);
    True when it was cut. A stream is read to its end, or to STREAM_MAX_BYTES."""
    if size is not None and size > MAX_INPUT_BYTES:
        f.seek(size - MAX_INPUT_BYTES)
        data = f.read(MAX_INPUT_BYTES)
        return data, True
    chunks: list[bytes] = []
    total = 0
    seen = 0
    cut = False
    while seen < STREAM_MAX_BYTES:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        seen += len(chunk)
        while total - len(chunks[0]) >= MAX_INPUT_BYTES:  # keep a bounded tail of a pipe
            total -= len(chunks.pop(0))
            cut = True
    else:
        cut = True  # an endless stream (`yes | hangdoctor analyze -`): stop here
    data = b"".join(chunks)
    if len(data) > MAX_INPUT_BYTES:
        data, cut = data[-MAX_INPUT_BYTES:], True
    return data, cut


def _read_special(path: str) -> tuple[bytes, bool]:
    """Read a FIFO / device / socket without ever blocking: wait at most FIRST_DATA_TIMEOUT_S
    for a writer, read at most MAX_INPUT_BYTES (/dev/zero never ends), in STREAM_TIMEOUT_S."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        total = 0
        start = time.monotonic()
        while total < MAX_INPUT_BYTES:
            now = time.monotonic()
            if now - start > STREAM_TIMEOUT_S:
                break
            try:
                chunk = os.read(fd, min(1 << 20, MAX_INPUT_BYTES - total))
            except BlockingIOError:  # a writer is there but has not written yet
                chunk = None
            if chunk:
                chunks.append(chunk)
                total += len(chunk)
                continue
            if chunk == b"" and total:
                break  # the writer closed its end
            if not total and now - start > FIRST_DATA_TIMEOUT_S:
                raise InputError(
                    f"{path}: nothing to read (a pipe with no writer?) after {FIRST_DATA_TIMEOUT_S:.0f} s",
                    "write the evidence to a regular file, or pipe it into `-`",
                )
            time.sleep(0.02)
        return b"".join(chunks), total >= MAX_INPUT_BYTES
    finally:
        os.close(fd)


def read_input(path: str) -> tuple[str, str]:
    """Read one input (a file path, or ``-`` for stdin) as (source name, text).

    Never fails on content: undecodable bytes are replaced, NUL bytes dropped, and a file over
    64 MiB is read from its last 64 MiB (the text's ``notes`` say so). Never blocks: a FIFO
    without a writer, a device or an endless stream is given up on or cut. Raises
    :class:`InputError` when the file is missing, a directory or unreadable.
    """
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise InputError("cannot read standard input: it is not a byte stream", "give a file")
        try:
            if stream.isatty():
                raise InputError(
                    "standard input is a terminal",
                    "pipe the evidence in (cat dump.txt | ...) or give a file",
                )
        except (ValueError, OSError):
            pass
        data, cut = _read_tail(stream, None)
        name = "<stdin>"
    else:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise InputError(f"{path}: no such file", "check the path") from None
        except OSError as e:
            raise InputError(
                f"{path}: cannot read it ({e.strerror or e})", "check the path and its permissions"
            ) from None
        if stat.S_ISDIR(st.st_mode):
            raise InputError(
                f"{path} is a directory", f"give the files in it ({path.rstrip('/')}/*)"
            )
        try:
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    data, cut = _read_tail(f, os.fstat(f.fileno()).st_size)
            else:
                data, cut = _read_special(path)
        except PermissionError:
            raise InputError(
                f"{path}: permission denied", "make it readable or run as its owner"
            ) from None
        except OSError as e:
            raise InputError(
                f"{path}: cannot read it ({e.strerror or e})", "check the file"
            ) from None
        name = os.path.basename(path) or path
    text, notes = _decode(data)
    if cut:
        nl = text.find("\n")
        text = text[nl + 1 :] if nl >= 0 else text  # drop the partial first line
        notes.insert(0, "input larger than 64 MiB: only its last 64 MiB were read")
    out = ReadText(text)
    out.notes = tuple(f"{name}: {n}" for n in notes)
    return name, out


def _dumps_of(seg: Segment) -> list[PastedDump]:
    if seg.kind == "pyspy-text":
        return parse_pyspy_text(seg.lines)
    if seg.kind == "pyspy-json":
        return parse_pyspy_json(seg.text)
    if seg.kind == "faulthandler":
        return parse_faulthandler(seg.lines)
    if seg.kind == "traceback":
        return dumps_from_tracebacks(parse_tracebacks(seg.lines))
    if seg.kind == "gdb":
        return parse_gdb(seg.lines)
    return []


class _Builder:
    def __init__(self) -> None:
        self.processes: dict[int, dict] = {}
        self.stacks: dict[str, dict] = {}
        self.log_lines: list[str] = []
        self.log_sources: list[str] = []
        self.kernel_lines: list[str] = []
        self.gpus: Optional[dict] = None
        self.env: dict = {}
        self.versions: dict = {}
        self.notes: list[str] = []
        self.pasted: list[dict] = []
        self.pasted_text: list[dict] = []  # every input's lines, for the knowledge rules
        self.pasted_prose: list[dict] = []  # the poster's sentences: context, never log lines
        self.smi_problem: Optional[tuple[str, str]] = None  # (status, the line that says so)
        self.topology: list[str] = []  # nvidia-smi topo -m rows
        self.commands: list[str] = []  # launch commands, continuations joined
        self.given: dict[str, list[str]] = {f: [] for f in FAMILIES}
        self.synthetic: dict[str, int] = {}
        self.next_synthetic = -1
        self.dropped_dumps = 0

    def _pid_for(self, dump: PastedDump, source: str, where: str) -> Optional[int]:
        """The dump's pid, or a synthetic negative one (None once there are too many)."""
        if dump.pid is not None:
            return dump.pid
        key = f"{source}|{dump.group}" if dump.group else f"{source}|{dump.kind}@{where}"
        if key not in self.synthetic:
            if len(self.synthetic) >= MAX_SYNTHETIC:
                return None
            self.synthetic[key] = self.next_synthetic
            self.next_synthetic -= 1
        return self.synthetic[key]

    def add_process(self, proc: dict) -> None:
        pid = proc["pid"]
        cur = self.processes.setdefault(pid, {"pid": pid})
        for k, v in proc.items():
            if v is not None and (k not in cur or cur[k] in (None, "", [])):
                cur[k] = v

    def add_dump(self, dump: PastedDump, source: str, where: str) -> None:
        pid = self._pid_for(dump, source, where)
        if pid is None:
            self.dropped_dumps += 1
            return
        entry = self.stacks.setdefault(str(pid), {"status": "ok", "error": None, "samples": []})
        sample: dict = {"threads": dump.threads, "source": source, "format": dump.kind}
        if dump.truncated:
            sample["truncated"] = True
        entry["samples"].append(sample)
        if len(entry["samples"]) > MAX_SAMPLES_PER_PID:  # keep the latest dumps of a process
            del entry["samples"][0]
            self.dropped_dumps += 1
        proc: dict = {"pid": pid, "is_python": True}
        if dump.kind.startswith("pyspy"):
            # py-spy only dumps live processes; a faulthandler / Ctrl-C dump is often the
            # process's last words, so those say nothing about it being alive
            proc["alive"] = True
        if pid < 0:
            proc["name"] = f"{dump.kind} dump #{-pid} from {source} (pid unknown)"
            proc["synthetic"] = True
        if dump.cmdline:
            argv = dump.cmdline.split()
            proc["cmdline"] = argv
            proc["name"] = (
                argv[0].rsplit("/", 1)[-1] if not argv[0].startswith("sglang::") else argv[0]
            )
        rank, src = rank_from_text(dump.cmdline)
        if dump.rank is not None and rank is None:
            rank, src = dump.rank, "cmdline"
        if rank is not None:
            proc["rank"], proc["rank_source"] = rank, src
        role = role_from_text(dump.cmdline)
        if role:
            proc["role"] = role
        if dump.python:
            proc["python_version"] = dump.python
        self.add_process(proc)
        for note in dump.notes:
            self.notes.append(f"{source} (pid {pid}): {note}")
        if dump.truncated:
            self.notes.append(f"{source}: the {dump.kind} dump of pid {pid} looks cut short")

    def add_segment(self, seg: Segment, source: str, document: bool = False) -> None:
        kind = seg.kind
        if kind in ("pyspy-text", "pyspy-json", "faulthandler", "traceback", "gdb"):
            dumps = _dumps_of(seg)
            for n, d in enumerate(dumps):
                # a dump written through a log prefix: the prefix names its writer
                if d.pid is None and seg.prefix_pid is not None:
                    d.pid = seg.prefix_pid
                if d.rank is None and seg.prefix_rank is not None:
                    d.rank = seg.prefix_rank
                if d.threads:
                    self.add_dump(d, source, f"{seg.start}#{n}")
            if dumps:
                self.given["stacks"].append(source)
            if kind in ("traceback", "faulthandler") or seg.raw is not None:
                # crash reports are log evidence too (CUDA OOM, Bus error, the exception type);
                # a prefixed dump stays in the log as written
                self.log_lines.extend(seg.raw if seg.raw is not None else seg.lines)
        elif kind == "log":
            # a poster's sentences are context, not log lines (parsers/prose.py)
            self.log_lines.extend(split_prose(seg.lines, document)[0])
            self.given["log"].append(source)
            if len(self.log_lines) > 4 * LOG_TAIL_LINES:
                del self.log_lines[:-LOG_TAIL_LINES]
        elif kind == "kernel":
            self.kernel_lines.extend(x for x in seg.lines if x.strip())
            self.given["kernel_log"].append(source)
        elif kind in ("nvidia-smi", "nvidia-smi-q"):
            parsed = (
                parse_nvidia_smi_table(seg.lines)
                if kind == "nvidia-smi"
                else parse_nvidia_smi_q(seg.lines)
            )
            if parsed["devices"]:
                self._merge_gpus(parsed)
                self.given["gpus"].append(source)
        elif kind == "ps":
            procs = parse_ps(seg.lines)
            for p in procs:
                self.add_process(p)
            if procs:
                self.given["processes"].append(source)
        elif kind == "env":
            self.env.update(parse_env(seg.lines))
            self.given["env"].append(source)
        elif kind == "collect-env":
            self.versions.update(parse_collect_env(seg.lines))
            self.given["versions"].append(source)
        elif kind == "nvidia-smi-topo":
            self.topology.extend(x for x in seg.lines if x.strip())
        elif kind == "command":
            self.commands.append(" ".join(x.rstrip().rstrip("\\").strip() for x in seg.lines))

    def scan_nvidia_smi(self, lines: list[str], source: str) -> None:
        """A pasted nvidia-smi error, or a poster saying it blocked: the GPU side did not answer
        (gpu.health reads it like a live nvidia-smi that timed out or failed)."""
        for line in lines:
            if len(line) > 2000:
                continue
            if _SMI_TIMEOUT.search(line):
                self.smi_problem = ("timeout", f"{source}: {line.strip()}")
                return
            if self.smi_problem is None and _SMI_FAILED.search(line) and "version mismatch" not in line:
                # (a driver/library version mismatch is not a GPU that failed: a rule weighs it)
                self.smi_problem = ("failed", f"{source}: {line.strip()}")

    def _merge_gpus(self, parsed: dict) -> None:
        if self.gpus is None:
            self.gpus = parsed
            return
        by_idx = {d["index"]: d for d in self.gpus["devices"]}
        for d in parsed["devices"]:
            old = by_idx.get(d["index"])
            if old is None:
                self.gpus["devices"].append(d)
                continue
            old["samples"].extend(d.get("samples", []))
            for k, v in d.items():
                if k not in old or (k == "errors" and v):
                    old[k] = v
        for k in ("driver_version", "cuda_driver_version"):
            self.gpus.setdefault(k, parsed.get(k))

    def enrich_ranks_from_log(self) -> None:
        """A log prefix "(VllmWorker rank=1 pid=456)" says which pid is which rank."""
        if not self.log_lines or not self.processes:
            return
        from hangdoctor.snapshot.loglines import split_prefix

        seen: dict[int, int] = {}
        for line in self.log_lines:
            if "pid=" not in line:
                continue
            pref = split_prefix(line)
            if pref.pid is not None and pref.rank is not None:
                seen.setdefault(pref.pid, pref.rank)
        for pid, rank in seen.items():
            p = self.processes.get(pid)
            if p is not None and p.get("rank") is None:
                p["rank"], p["rank_source"] = rank, "log"

    def _root_pids(self) -> list[int]:
        """Top-most processes of the server: those whose parent is not in the paste, among the
        ones that look like part of it (dumped, a known role, or Python) -- not a shell at pid 1."""

        def relevant(p: dict) -> bool:
            return bool(
                str(p["pid"]) in self.stacks
                or p.get("role")
                or "python" in str(p.get("name", ""))
                or p.get("rank") is not None
            )

        return sorted(
            p["pid"]
            for p in self.processes.values()
            if p["pid"] > 0 and relevant(p) and p.get("ppid") not in self.processes
        )

    def snapshot(self) -> dict:
        snap: dict = {
            "schema_version": 1,
            "tool": {"name": "hangdoctor", "version": __version__},
            "origin": "pasted",
            "redacted": True,
            "manifest": [],
        }
        for family, (_kinds, how) in FAMILIES.items():
            srcs = list(dict.fromkeys(self.given[family]))
            if srcs:
                snap["manifest"].append(
                    {"source": family, "status": "ok", "detail": "pasted: " + ", ".join(srcs)}
                )
            else:
                snap["manifest"].append(
                    {
                        "source": family,
                        "status": "not-given",
                        "detail": "not in the paste; to get it: " + how,
                    }
                )
        if self.smi_problem:
            status, line = self.smi_problem
            snap["manifest"].append(
                {"source": "nvidia-smi", "status": status, "detail": "pasted: " + line[:200]}
            )
        if self.processes:
            snap["processes"] = sorted(
                self.processes.values(), key=lambda p: (p["pid"] < 0, abs(p["pid"]))
            )
            snap["targets"] = {"root_pids": self._root_pids(), "discovered": False}
        if self.stacks:
            snap["stacks"] = self.stacks
        if self.gpus:
            snap["gpus"] = self.gpus
        if self.kernel_lines:
            snap["kernel_log"] = {"lines": self.kernel_lines[-KERNEL_LINES:]}
        if self.given["log"] or self.log_lines:
            snap["log"] = {
                "path": ", ".join(dict.fromkeys(self.given["log"])) or None,
                "tail": self.log_lines[-LOG_TAIL_LINES:],
            }
        if self.versions:
            snap["versions"] = self.versions
        if self.topology:
            snap["topology"] = {"matrix": self.topology[:64]}
        if self.commands:
            snap["commands"] = self.commands[:32]
        if self.env:
            snap["env"] = self.env
        snap["pasted"] = self.pasted
        if self.pasted_text:
            snap["pasted_text"] = self.pasted_text
        if self.pasted_prose:
            snap["pasted_prose"] = self.pasted_prose
        if self.notes:
            snap["notes"] = self.notes
        return snap


# what makes a line a log line: a level, a timestamp, a known prefix or an engine's own phrasing
_LOG_LIKE = re.compile(
    r"\b(?:INFO|WARN(?:ING)?|ERROR|DEBUG|CRITICAL|FATAL|TRACE)\b|\b[IWEF]\d{4} |\d\d:\d\d:\d\d|"
    r"^\s*\((?:\w+ )?pid=\d+\)|^\[(?:rank|TP|DP|PP)\d|NCCL|it/s\]|%\||Traceback|Error\b|Exception\b"
)
_MARKUP = re.compile(r"^\s*(?:```\w*|\.\.\.|\[\.\.\..*\.\.\.\]|</?details>.*|<summary>.*|#+ .*|[-*] .*)?\s*$")


def _unrecognised(segs: list[Segment]) -> int:
    """Lines of "log" segments that look like no log at all (a poster's prose, code, a table of
    unknown shape): counted so the report can say they were read only as text."""
    n = 0
    for seg in segs:
        if seg.kind != "log":
            continue
        for line in seg.lines:
            if line.strip() and not _MARKUP.match(line) and not _LOG_LIKE.search(line):
                n += 1
    return n


def analyze_inputs(inputs: list[tuple[str, str]]) -> dict:
    """Turn (source name, text) pairs into one redacted snapshot dict (``origin: "pasted"``).

    Saved snapshot / analysis JSON documents are not merged here: they are listed in
    ``pasted`` with kind ``snapshot`` / ``analysis`` and a note (the CLI routes those itself).
    """
    b = _Builder()
    for source, given in inputs:
        b.notes.extend(getattr(given, "notes", ()) or ())
        text, taken = unwrap(str(given))
        if taken:
            b.notes.append(f"{source}: read without its wrapping ({', '.join(taken)})")
        segs = split_segments(text)
        kinds = list(dict.fromkeys(s.kind for s in segs))
        entry: dict = {
            "source": source,
            "kinds": kinds,
            "lines": str(given).count("\n") + (1 if given and not str(given).endswith("\n") else 0),
            "bytes": len(str(given).encode("utf-8", "replace")),
        }
        if taken:
            entry["unwrapped"] = taken
        flavours = sorted({s.flavour for s in segs if s.flavour})
        if flavours:
            entry["log_flavours"] = flavours
        if not segs:
            b.notes.append(f"{source}: empty, nothing to analyse")
        b.pasted.append(entry)
        all_lines = str(text).split("\n")
        # bounded like the log tail: the last lines, each cut to a readable length
        kept = [x[:PASTED_LINE_CHARS] for x in all_lines[-PASTED_TEXT_LINES:]]
        document = is_document(kept)
        kept, prose, scripts = split_context(kept, document)
        b.pasted_text.append({"source": source, "lines": kept})
        if prose:
            b.pasted_prose.append({"source": source, "lines": prose, "document": document,
                                   "report": is_report(prose)})
        if scripts:  # a script the poster ran says what it would do, not where a process is
            b.pasted_prose.append({"source": source, "lines": scripts, "document": True, "script": True})
        # a poster who says nvidia-smi blocked reports what a command did: read in prose too
        b.scan_nvidia_smi(kept + ([] if document else prose), source)
        plain = _unrecognised(segs)
        if plain:
            b.notes.append(
                f"{source}: {plain} line(s) matched no known kind (prose, code or an unknown format); "
                "they were kept as text, and the knowledge rules read them"
            )
        for seg in segs:
            if seg.kind in ("snapshot", "analysis"):
                b.notes.append(f"{source} is a saved {seg.kind} JSON; it is not raw evidence")
                continue
            try:
                b.add_segment(seg, source, document)
            except Exception as e:  # noqa: BLE001 - one bad segment must not lose the rest
                b.notes.append(
                    f"{source}: could not parse the {seg.kind} part at line {seg.start + 1} "
                    f"({type(e).__name__}: {str(e)[:200]})"
                )
    b.enrich_ranks_from_log()
    if b.dropped_dumps:
        b.notes.append(
            f"{b.dropped_dumps} stack dump(s) left out: at most {MAX_SAMPLES_PER_PID} per process "
            f"and {MAX_SYNTHETIC} processes of unknown pid are kept"
        )
    return redact_obj(b.snapshot())
