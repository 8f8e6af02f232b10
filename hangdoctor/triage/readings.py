"""Readings of a log, a paste or a script beyond where each process waits: sizes that differ
beside a collective, a loop's line repeated, a table of working and failing configurations that a
version separates, requests waiting with none running, and "the command, then its output". Each
adds a :class:`Position` that the differential (``differential.py``) turns into causes through
``knowledge/priors.json``; each names its source beside it.

Layer: triage; may import: hangdoctor.triage, hangdoctor.evidence, hangdoctor.knowledge and the
foundation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from hangdoctor.evidence.model import Evidence


@dataclass
class Position:
    wait: str  # the wait class (evidence/stacks.py's wait_kind, collective ops folded)
    frame: str
    pids: list[int] = field(default_factory=list)
    factor: float = 1.0  # below 1 for a candidate (a script's waits), not where a process was seen


# a collective needs the same sizes on every rank (NCCL's API docs: count and datatype must
# match across the communicator; torch's all_to_all_single: the split sizes must agree with the
# peers'): lines that differ only in a size printed next to a collective are ranks that disagree
_COLLECTIVE_WORD = re.compile(r"all[-_ ]?to[-_ ]?all|all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|"
                              r"\bbroadcast\b", re.I)
_SIZE = re.compile(r"torch\.Size\(\[[\d, ]*\]\)|\bshape[=: ]+\(?\[?[\d, ]+\]?\)?|"
                   r"\b(?:count|numel|size|len|split_sizes?)\s*[=:(]\s*\[?[\d, ]+\]?", re.I)
_LEAD_STAMP = re.compile(r"^[\s\[]*(?:\d{4}-\d\d-\d\d[T ])?\d\d:\d\d:\d\d[.,\d]*\]?\s*")


def sizes_disagree(lines: list[str], obs: Any) -> None:
    groups: dict[str, set[tuple[str, ...]]] = {}
    first: dict[str, str] = {}
    for line in lines[-3000:]:
        body = line.split(" # ")[0]
        if not _COLLECTIVE_WORD.search(body):
            continue
        sizes = tuple(_SIZE.findall(body))
        if not sizes:
            continue
        key = re.sub(r"\d+", "#", _SIZE.sub("§", _LEAD_STAMP.sub("", body)))
        groups.setdefault(key, set()).add(sizes)
        first.setdefault(key, body.strip()[:160])
    for key, seen in groups.items():
        if len(seen) > 1:
            shown = " vs ".join(", ".join(t) for t in sorted(seen)[:2])
            obs.positions.setdefault("size-mismatch", Position("size-mismatch", f"{first[key]} ({shown})"))
            return


REPEAT_MIN = 4  # the same line this many times in a row (only numbers differ) is a loop
_ELISION = re.compile(r"^\s*(?:\.{3}|…|\[?\(?(?:repeat(?:s|ed)?|same)\b[^)\]]*[)\]]?)\s*$", re.I)


_CLOCK = re.compile(r"\d\d:\d\d:\d\d|\d{4}-\d\d-\d\d|\b\d{10}(?:\.\d+)?\b")


def _enumerates(run: list[str]) -> bool:
    """Lines with no clock whose numbers differ on every line, or count a field up by one from 0
    or 1: a listing printed at once (collect_env's and nvidia-smi -L's "GPU 0: …", "GPU 1: …", a
    peer-access matrix "Device=0 CAN Access Peer Device=1" …), no loop. A loop that makes no
    progress prints the same values again, or the time it printed them."""
    if any(_CLOCK.search(x) for x in run):
        return False
    nums = [[int(n) for n in re.findall(r"\d+", x)] for x in run]
    if any(len(n) != len(nums[0]) for n in nums):
        return False
    if len({tuple(n) for n in nums}) == len(nums):
        return True  # every line its own values (a matrix of device pairs): a table, printed once
    return any(nums[0][i] in (0, 1) and all(nums[j][i] == nums[0][i] + j for j in range(len(nums)))
               for i in range(len(nums[0])))


def log_repeats(lines: list[str], obs: Any, quiet: Callable[[str], bool]) -> None:
    """A loop that prints and makes no progress: one line again and again (REPEAT_MIN times in a
    row, or twice and then the poster's '...' for the rest). Not when that line is a progress
    report (a throughput line repeats on a healthy server), names a phase of start-up (a
    'waiting for the other ranks' line repeats while it waits) or is an error."""
    def loops(run: list[str]) -> bool:
        if len(run) >= REPEAT_MIN and not quiet(run[-1]) and not _enumerates(run):
            obs.positions.setdefault("log-repeats", Position("log-repeats", run[-1][:160]))
            return True
        return False

    run: list[str] = []
    key = None
    for x in lines[-3000:]:
        body = x.strip()
        if not body or body.startswith("```"):
            continue
        if _ELISION.match(body) and len(run) >= 2:
            run += [run[-1]] * REPEAT_MIN
            continue
        k = re.sub(r"\d+", "#", body)
        if k == key:
            run.append(body)
            continue
        if loops(run):
            return
        run, key = [body], k
    loops(run)


# a poster's table of configurations, each marked as working or failing: when a version (alone
# or with the hardware beside it) is what every failing row has and no working row has, the
# version is what changed (a driver / runtime regression)
_WORKS = re.compile(r"✅|✔|☑|\b(?:works|working|OK|passes|fine)\b")  # a line with both is skipped
_FAILS = re.compile(r"❌|✗|✖|\b(?:hangs?|fails?|failing|stuck|broken|(?:doesn'?t|does not|didn'?t|did not) work|"
                    r"not working)\b", re.I)
_LABELLED = re.compile(r"(?P<label>[A-Za-z][\w-]*(?: [A-Za-z][\w-]*)?)\s*[:=]+\s*(?P<value>v?\d[\w.+-]*|[\w.+-]+)")
_VERSIONISH = re.compile(r"^v?\d+(?:\.\d+)+")


def versions_split(lines: list[str], obs: Any) -> None:
    rows: list[tuple[bool, set[tuple[str, str]]]] = []
    for line in lines[-2000:]:
        f = bool(_FAILS.search(line))
        w = bool(_WORKS.search(_FAILS.sub(" ", line)))  # "not working" is no "working"
        if w == f:
            continue
        items: set[tuple[str, str]] = set()
        for m in _LABELLED.finditer(line):
            label = m.group("label").lower().replace(" version", "").strip()
            value = m.group("value")
            items.add((label, value))
            if _VERSIONISH.match(value):
                items.add((label, value.lstrip("v").split(".")[0] + ".x"))
        if len(items) >= 2:
            rows.append((f, items))
    failing = [i for bad, i in rows if bad]
    working = [i for bad, i in rows if not bad]
    if not failing or not working:
        return
    common = set.intersection(*failing)
    combos = [(a,) for a in common] + [(a, b) for a in common for b in common if a < b]
    for combo in combos:
        if not any(_VERSIONISH.match(v) for _l, v in combo):
            continue
        if not any(all(c in w for c in combo) for w in working):
            text = " + ".join(f"{lbl} {v}" for lbl, v in combo)
            obs.positions.setdefault("version-split", Position(
                "version-split", f"every failing configuration has {text}; no working one does"))
            return


# vLLM's periodic scheduler stats (v1/metrics/loggers.py: "Running: %d reqs", "Waiting: %d
# reqs"; the v0 engine's metrics.py says "Pending: %d reqs"): requests waiting while none runs is
# a scheduler that cannot admit what waits (the KV cache or the token budget too small for it,
# or a request it never picks)
_STATS = re.compile(r"Running: (?P<run>\d+) reqs.{0,80}?(?:Waiting|Pending): (?P<wait>\d+) reqs|"
                    r"(?:Waiting|Pending): (?P<wait2>\d+) reqs.{0,80}?Running: (?P<run2>\d+) reqs")


# the same lines' throughput over the interval since the last one ("Avg prompt throughput: %.1f
# tokens/s, Avg generation throughput: %.1f tokens/s"): both zero with requests running means no
# step of the engine finished in the interval; several intervals in a row, the step in flight
# does not return (a kernel, a collective, a wait inside the forward pass)
_THROUGHPUT = re.compile(r"Avg prompt throughput: (?P<p>[\d.]+) tokens/s, Avg generation throughput: (?P<g>[\d.]+)")
STEP_STUCK_MIN = 3  # stats lines in a row (vLLM logs one every 10 s): half a minute without a step


def queue_stuck(lines: list[str], obs: Any) -> None:
    last = None
    still = 0  # stats lines in a row, at the end, with requests running and no token made
    for line in lines[-3000:]:
        m = _STATS.search(line)
        if m:
            last = (int(m.group("run") or m.group("run2")), int(m.group("wait") or m.group("wait2")), line)
            t = _THROUGHPUT.search(line)
            still = still + 1 if (last[0] > 0 and t and float(t.group("p")) == 0 and float(t.group("g")) == 0) else 0
    if last and last[0] == 0 and last[1] > 0:
        obs.positions.setdefault("queue-stuck", Position(
            "queue-stuck", f"{last[1]} request(s) waiting, none running: {last[2].strip()[:140]}"))
    elif last and still >= STEP_STUCK_MIN:
        obs.positions.setdefault("step-stuck", Position(
            "step-stuck", f"{still} stats lines in a row with {last[0]} request(s) running and no token "
                          f"made: {last[2].strip()[:140]}"))


# "the command, then its output": a pasted script and what it printed. The last line the run
# printed that the script prints literally places the stop at the script's next statement, and
# what that statement calls says what it waits on
_PRINT_LITERAL = re.compile(r"""^\s*print\(\s*(?P<f>f?)(["'])(?P<text>[^"']{2,120})\2\s*(?:,[^)]*)?\)\s*$""")
_STATEMENT_WAITS: list[tuple[str, re.Pattern[str]]] = [
    # asyncio: run() / run_until_complete() block the thread until the awaited future is done on
    # this loop (a future of another loop never is: asyncio docs, "Future attached to a
    # different loop"); the front end's own loop is where such a call waits
    ("event-loop", re.compile(r"\basyncio\.run\(|run_until_complete\(|\bawait\b")),
    # tearing a process group down waits for its pending work and, in some NCCL versions, for the
    # peers (torch distributed_c10d.py destroy_process_group; differential.py's teardown wait)
    ("teardown", re.compile(r"destroy_process_group\(|ncclComm(?:Destroy|Abort|Finalize)\(")),
    ("rendezvous", re.compile(r"init_process_group\(|init_distributed\(|\brendezvous\(|TCPStore\(")),
    ("collective", re.compile(r"\b(?:all_reduce|all_gather\w*|broadcast\w*|barrier|all_to_all\w*|reduce_scatter\w*)\(")),
    ("load-call", re.compile(r"from_pretrained\(|load_state_dict\(|safe_open\(|torch\.load\(|snapshot_download\(")),
    # a remote task's or an actor's answer (ray.get, a future's result): it never comes when the
    # worker that owes it died without the caller being told
    ("remote-wait", re.compile(r"\bray\.get\(|\.result\(")),
    # a thread's or a process's join (never os.path.join or str.join: they take arguments)
    ("ipc-wait", re.compile(r"\.join\(\s*(?:timeout\s*=[^()]*)?\)|\.get\(\s*\)|\.wait\(")),
    ("cuda-sync", re.compile(r"torch\.cuda\.synchronize\(|\.synchronize\(\)|\.item\(\)|\.cpu\(\)|\.tolist\(\)")),
    ("serving-call", re.compile(r"\.generate\(|\.chat\(|\.completions?\.|requests\.post\(|\.encode\(")),
]


_DEFINES = ("def ", "async def ", "class ")  # a definition names a call, it does not make it


def _wait_of_statement(stmt: str) -> str | None:
    """The wait class of the first call the statement makes that waits (_STATEMENT_WAITS)."""
    return next((wait for wait, rx in _STATEMENT_WAITS if rx.search(stmt)), None)


_HANG_COMMENT = re.compile(r"^(?P<stmt>\s*[^#\s][^#]*?)\s+#(?P<said>.*?)\b(?:hangs?|hung|stuck|blocks?|freezes|"
                           r"never (?:returns|finishes|completes))\b", re.I)
# "# this never hangs", "# doesn't hang any more", "# no longer stuck": the comment denies it
_DENIED = re.compile(r"\b(?:not|never|no longer|no|without)\s+(?:\w+\s+)?$|n't\s+(?:\w+\s+)?$", re.I)


def _marks_hang(line: str, obs: Any) -> bool:
    """The poster's own comment on the statement that hangs ("ray.get(...)  # hangs forever")."""
    m = _HANG_COMMENT.match(line)
    wait = None if not m or _DENIED.search(m.group("said")) else _wait_of_statement(m.group("stmt"))
    if wait is None:
        return False
    obs.positions.setdefault(wait, Position(wait, f"the poster marks this statement as where it hangs: {line.strip()[:120]}"))
    return True


def _literals(code: list[str]) -> list[tuple[re.Pattern[str], int]]:
    """What each print of the script prints (an f-string's {…} stand for anything), by line."""
    out: list[tuple[re.Pattern[str], int]] = []
    for i, x in enumerate(code):
        m = _PRINT_LITERAL.match(x)
        if m:
            text = m.group("text").strip()
            if m.group("f"):
                rx = "".join(".+?" if part.startswith("{") else re.escape(part)
                             for part in re.split(r"(\{[^{}]*\})", text))
            else:
                rx = re.escape(text)
            if re.sub(r"\\.|\.\+\?", "", rx).strip():
                out.append((re.compile(rx + "$"), i))
    return out


def script_stop(ev: Evidence, lines: list[str], obs: Any) -> None:
    printed = [x.strip() for x in lines if x.strip()]
    for x in lines[-3000:]:
        if _marks_hang(x, obs):
            return
    for s in ev.snapshots:
        for item in s.get("pasted_prose") or []:
            if not isinstance(item, dict) or not item.get("script"):
                continue
            code = [x for x in item.get("lines") or [] if isinstance(x, str)]
            if any(_marks_hang(x, obs) for x in code):
                return
            literals = _literals(code)
            if not literals or not printed:
                continue
            hit = next(((x, i) for x in reversed(printed) for rx, i in literals if rx.match(x)), None)
            if hit is None:
                continue
            last, at = hit
            # the statements after that print, up to the first that names a wait (a kernel
            # launch returns at once; the synchronize after it is where the wait shows)
            following = [x.strip() for x in code[at + 1:] if x.strip() and not x.strip().startswith("#")][:6]
            for nxt in following:
                wait = None if nxt.startswith(_DEFINES) else _wait_of_statement(nxt)
                if wait:
                    obs.positions.setdefault(wait, Position(
                        wait, f"the run printed {last!r} last; the script goes on to: {nxt[:100]}"))
                    return
                if _PRINT_LITERAL.match(nxt):
                    break  # the next print was not reached: what comes after it never ran


_HANG_WORD = re.compile(r"\b(?:hangs?|hung|hanging|stuck|deadlock\w*|freez\w*|frozen)\b", re.I)


def _speaks_of_hang(line: str) -> bool:
    """A hang word in the line that no negation right before it denies."""
    return any(not _DENIED.search(line[:m.start()]) for m in _HANG_WORD.finditer(line))


SCRIPT_FACTOR = 0.5  # a statement the run may have stopped at weighs less than one it was seen at


def script_waits(ev: Evidence, lines: list[str], obs: Any, reported: bool) -> None:
    """A reproducer pasted without any output of it (no line it prints is in the evidence): the
    run stopped at one of the statements that wait, and the script names them in the order it
    reaches them. Read only when nothing else placed the stop, and only for a script of a hang
    (its report says so, or the script speaks of it in its comments or strings); the first three
    wait classes are candidates, at a lower weight than a stop seen in a stack or a log."""
    printed = {x.strip() for x in lines if x.strip()}
    for s in ev.snapshots:
        for item in s.get("pasted_prose") or []:
            if not isinstance(item, dict) or not item.get("script"):
                continue
            code = [x for x in item.get("lines") or [] if isinstance(x, str)]
            if not (reported or any(_speaks_of_hang(x) for x in code)):
                continue
            if any(rx.match(x) for rx, _i in _literals(code) for x in printed):
                continue  # its output is here: where it got to is read from that, not guessed
            seen: list[str] = []
            for x in code:
                stmt = x.strip()
                if not stmt or stmt.startswith(("#",) + _DEFINES) or _PRINT_LITERAL.match(stmt):
                    continue
                wait = _wait_of_statement(stmt)
                if wait and wait not in seen and wait not in obs.positions:
                    seen.append(wait)
                    obs.positions[wait] = Position(
                        wait, f"the script, pasted without its output, waits here: {stmt[:100]}",
                        factor=SCRIPT_FACTOR)
                if len(seen) >= 3:
                    return


# a program that says what it starts ("Calling destroy_process_group()...", "Running
# all_reduce ...", "Waiting for barrier()") and prints nothing after it stopped inside that call
_ANNOUNCE = re.compile(r"^\W{0,3}(?:\[[^\]]*\]:?\s*)*(?:Calling|Running|Entering|Starting|Waiting (?:for|on)|"
                       r"Doing|Executing)\s+(?P<call>[\w.]+(?:\(\))?)\s*(?:\.{2,}|…)?\s*$", re.I)


def announced_stop(ev: Evidence, obs: Any) -> None:
    """The last line a program printed (in each pasted output or log) announces a call that
    waits: the stop is in that call."""
    outputs: list[list[str]] = []
    for s in ev.snapshots:
        outputs += [[x for x in item.get("lines") or [] if isinstance(x, str)]
                    for item in s.get("pasted_text") or [] if isinstance(item, dict)]
        if not s.get("pasted_text"):
            outputs.append([x for x in (s.get("log") or {}).get("tail") or [] if isinstance(x, str)])
    for out in outputs:
        last = next((x.strip() for x in reversed(out[-50:]) if x.strip() and not x.strip().startswith("```")), "")
        m = _ANNOUNCE.match(last)
        if not m:
            continue
        wait = _wait_of_statement(m.group("call").rstrip("()") + "(")
        if wait:
            obs.positions.setdefault(wait, Position(wait, f"the last line announces the call it stopped in: {last[:120]}"))
