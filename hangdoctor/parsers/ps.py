"""``ps`` listings into the snapshot's ``processes``: ``ps aux``, ``ps -ef``, ``ps auxf`` /
``ps -ef --forest`` (tree art stripped, parent taken from the tree), ``ps -eo ...`` and
``ps -eLo pid,tid,stat,wchan:32,comm`` (one row per thread, gathered per process)::

    USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND
    root       46294  0.3  1.2 9876543 812345 ?     Sl   19:00   0:12 python3 -m vllm.entrypoints.openai.api_server
    root       46295  0.0  0.9 3456789 612345 ?     Sl   19:00   0:40  \\_ python3 -c from multiprocessing.spawn ...

ps's %CPU is a lifetime average, not the window rate the live probe measures, so it is kept as
``ps_cpu_pct`` and ``cpu_pct`` stays absent (unknown).

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from hangdoctor.parsers.frames import rank_from_text, role_from_text
from hangdoctor.parsers.text import clip_lines

# Column names ps prints, mapped to what they mean here.
_COLS = {
    "USER": "user",
    "UID": "user",
    "RUSER": "user",
    "EUSER": "user",
    "PID": "pid",
    "PPID": "ppid",
    "TID": "tid",
    "LWP": "tid",
    "SPID": "tid",
    "%CPU": "pcpu",
    "PCPU": "pcpu",
    "C": "c",
    "CP": "c",
    "%MEM": "pmem",
    "VSZ": "vsz",
    "VSIZE": "vsz",
    "RSS": "rss",
    "RSZ": "rss",
    "TTY": "tty",
    "TT": "tty",
    "STAT": "stat",
    "S": "stat",
    "STATE": "stat",
    "START": "start",
    "STIME": "start",
    "TIME": "time",
    "CPUTIME": "time",
    "WCHAN": "wchan",
    "NLWP": "nlwp",
    "THCNT": "nlwp",
    "COMMAND": "cmd",
    "CMD": "cmd",
    "ARGS": "cmd",
    "COMM": "comm",
    "UCMD": "comm",
    "UCOMM": "comm",
    "NI": "ni",
    "PRI": "pri",
    "ELAPSED": "etime",
    "ETIME": "etime",
    "PSR": "psr",
    "SZ": "sz",
    "ADDR": "addr",
    "F": "flags",
    "CLS": "cls",
    "RTPRIO": "rtprio",
    "PGID": "pgid",
    "SID": "sid",
    "SESS": "sid",
    "TGID": "pid",
    "LSTART": "lstart",
}
_CMD_COLS = ("cmd", "comm")
_FOREST = re.compile(r"^(?P<art>[\s|]*\\_ )")


def header_columns(line: str) -> Optional[list[str]]:
    """The ps columns of a header line, or None if the line is not a ps header."""
    toks = line.split()
    if len(toks) < 3 or "PID" not in toks and "TGID" not in toks:
        return None
    cols = []
    for t in toks:
        c = _COLS.get(t.upper().rstrip(":"))
        if c is None:
            return None
        cols.append(c)
    return cols


def _time_s(s: str) -> Optional[float]:
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.(\d+))?$", s)
    if not m:
        return None
    d, h, mi, sec = (int(x) if x else 0 for x in m.groups()[:4])
    return float(((d * 24 + h) * 60 + mi) * 60 + sec)


def _split_row(line: str, cols: list[str]) -> Optional[dict]:
    n = len(cols)
    last_is_cmd = cols[-1] in _CMD_COLS
    extra = 4 if "lstart" in cols else 0  # "Mon Nov 29 19:12:00 2025" is five tokens
    toks = line.split(None, n - 1 + extra) if last_is_cmd else line.split()
    if len(toks) < n + extra - (1 if last_is_cmd else 0):
        return None
    if extra:
        i = cols.index("lstart")
        toks = toks[:i] + [" ".join(toks[i : i + 5])] + toks[i + 5 :]
    if len(toks) < n:
        toks = toks + [""] * (n - len(toks))
    row = dict(zip(cols, toks[:n]))
    if not row.get("pid", "").isdigit():
        return None
    return row


def parse_ps(lines: Iterable[str]) -> list[dict]:
    """Parse ps output (one or several listings, each with its header) into process dicts."""
    procs: dict[int, dict] = {}
    cols: Optional[list[str]] = None
    forest_stack: list[tuple[int, int]] = []  # (depth, pid)
    for raw in clip_lines(lines):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        hc = header_columns(line)
        if hc:
            cols = hc
            forest_stack = []
            continue
        if cols is None:
            continue
        row = _split_row(line, cols)
        if row is None:
            continue
        _add_row(procs, row, forest_stack)
    return list(procs.values())


def _add_row(procs: dict, row: dict, forest_stack: list) -> None:
    pid = int(row["pid"])
    tid = int(row["tid"]) if row.get("tid", "").isdigit() else None
    cmd = row.get("cmd") or row.get("comm") or ""
    depth = None
    m = _FOREST.match(cmd)
    if m:
        depth = len(m.group("art"))
        cmd = cmd[m.end() :]
    elif cmd and "cmd" in row:
        depth = len(cmd) - len(cmd.lstrip())
    cmd = cmd.strip()
    p = procs.get(pid)
    if p is None:
        p = procs[pid] = {"pid": pid}
    if tid is not None and tid != pid:
        th = {"tid": tid}
        if row.get("stat"):
            th["status"] = row["stat"][0]
        if row.get("wchan") and row["wchan"] != "-":
            th["wchan"] = row["wchan"]
        if cmd:
            th["name"] = cmd
        p.setdefault("threads", []).append(th)
        return
    if row.get("ppid", "").isdigit():
        p["ppid"] = int(row["ppid"])
    if "cmd" in row and cmd:
        p["cmdline"] = cmd.split()
        # zombies and kernel threads show as "[python3] <defunct>"
        p.setdefault("name", cmd.split()[0].strip("[]").rsplit("/", 1)[-1][:64])
    if row.get("comm"):
        p["name"] = row["comm"].strip()
        if "cmd" not in row:
            p.setdefault("cmdline", [row["comm"].strip()])
    if row.get("user"):
        p["user"] = row["user"]
    if row.get("stat") and row["stat"][0] in "RSDTtZXIW":
        p["status"] = row["stat"][0]
        p["zombie"] = row["stat"][0] == "Z"
    if row.get("wchan") and row["wchan"] not in ("-", "0"):
        p["wchan"] = row["wchan"]
    for col, key, mult in (("rss", "rss_bytes", 1024), ("vsz", "vms_bytes", 1024)):
        if row.get(col, "").isdigit():
            p[key] = int(row[col]) * mult
    try:
        if row.get("pcpu"):
            p["ps_cpu_pct"] = float(row["pcpu"])
    except ValueError:
        pass
    if row.get("time"):
        t = _time_s(row["time"])
        if t is not None:
            p["cpu_time_s"] = t
    if row.get("nlwp", "").isdigit():
        p["num_threads"] = int(row["nlwp"])
    text = " ".join(p.get("cmdline") or []) or p.get("name") or ""
    rank, src = rank_from_text(text)
    if rank is not None:
        p["rank"], p["rank_source"] = rank, src
    role = role_from_text(text)
    if role:
        p["role"] = role
    # a forest listing without a PPID column still tells the parent: the row above, one level up
    if depth is not None and "ppid" not in p:
        while forest_stack and forest_stack[-1][0] >= depth:
            forest_stack.pop()
        if forest_stack and m:
            p["ppid"] = forest_stack[-1][1]
        forest_stack.append((depth, pid))
