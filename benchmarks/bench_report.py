"""The Markdown tables of the benchmark, the records they are made from, and its settings."""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from proc_tools import Measured

WEIGHTS_MIB = 8  # per worker: 64 workers stay small
SCENARIO_LIFETIME_S = 600.0  # every hung process ends on its own after this at the latest
DIAGNOSE_TIMEOUT_S = 120.0
MANUAL_TIMEOUT_S = 300.0
DUMP_SAMPLE = 3  # workers whose single py-spy dump is timed for the floor, each run
RENDER_REPEATS = 5
STARTUP_REPEATS = 7
TARGET_LOCAL_8 = 1.15  # x floor
TARGET_LOCAL_64 = 1.5  # x floor
TARGET_SSH_EXTRA_S = 0.5  # over the local figure
TARGET_HOSTS_16 = 2.0  # x one host
TARGET_MANUAL_8 = 5.0  # manual / hangdoctor


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def mark(ok: bool | None) -> str:
    return "–" if ok is None else ("yes" if ok else "**NO**")


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


@dataclass
class Diagnosis:
    m: Measured
    analysis: dict[str, Any] | None
    snapshot: dict[str, Any] | None
    remote_cpu_s: float | None = None  # the remote probe python + its py-spy children
    remote_rss_kib: int | None = None
    remote_total_cpu_s: float | None = None  # ... plus sshd sessions and shells

    @property
    def verdict(self) -> str:
        return (self.analysis or {}).get("verdict", f"rc {self.m.rc}")

    @property
    def hosts_ok(self) -> int:
        return sum(1 for h in (self.analysis or {}).get("hosts", []) if h.get("status") == "ok")


def pauses_s(snapshot: dict[str, Any] | None) -> list[float]:
    """Upper bound of each process's total py-spy pause: dumps x the entry's ``duration_s``.

    The snapshot keeps one ``duration_s`` per process: the longer of its two dumps, measured
    as py-spy's whole run (start, attach, read, exit), so this overstates the real pause.
    """
    out = []
    for entry in ((snapshot or {}).get("stacks") or {}).values():
        if entry.get("status") == "ok":
            out.append(len(entry.get("samples") or []) * float(entry.get("duration_s") or 0))
    return out


@dataclass
class WorkerRun:
    dump_s: float
    rtt_s: float
    local: Diagnosis
    ssh: Diagnosis
    upload: Diagnosis | None = None
    manual: Measured | None = None
    manual_same: Measured | None = None  # with -w WINDOW: ps and dumps again after the window
    ssh_one: Diagnosis | None = None  # hangdoctor over SSH with --window 0 (one sample)


@dataclass
class Results:
    window_s: float
    runs: int
    worker_sizes: list[int]
    host_sizes: list[int]
    machine: dict[str, str] = field(default_factory=dict)
    load_start: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    startup: dict[str, float | None] = field(default_factory=dict)
    workers: dict[int, list[WorkerRun]] = field(default_factory=dict)
    hosts: dict[int, list[tuple[Diagnosis, Diagnosis]]] = field(default_factory=dict)
    render: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _ssh_steps(m: Measured) -> int:
    return sum(
        1
        for line in m.stderr.decode(errors="replace").splitlines()
        if line.startswith("step ") and not line.startswith("step wait")
    )


def _limit_local(workers: int) -> float | None:
    return {8: TARGET_LOCAL_8, 64: TARGET_LOCAL_64}.get(workers)


def render_markdown(res: Results, command: str, elapsed_s: float) -> str:
    w = res.window_s
    out: list[str] = []
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    out.append("# hangdoctor benchmark\n")
    out.append(f"- date: {now}; whole benchmark took {elapsed_s:.0f} s")
    out.append(f"- command: `{command}`")
    mi = res.machine
    out.append(
        f"- machine: {mi.get('nproc')} CPUs ({mi.get('cpu')}), {mi.get('mem')} RAM, "
        f"Linux {mi.get('kernel')}"
    )
    out.append(
        f"- code measured: {mi.get('source')} (hangdoctor/, checks/, templates/ copied at the start)"
    )
    out.append(
        "- load average (1, 5, 15 min) at start "
        + ", ".join(f"{x:.2f}" for x in res.load_start)
        + "; at end "
        + ", ".join(f"{x:.2f}" for x in res.load_end)
        + " (other work on this machine shares its CPUs)"
    )
    out.append(
        f"- python {mi.get('python')}; {mi.get('py-spy')}; {mi.get('openssh')}; "
        f"asyncssh {mi.get('asyncssh')}"
    )
    out.append(
        f"- window {w:g} s (`--window {w:g}`); every figure is the median of {res.runs} "
        f"run(s), its comparison measured in the same run; scenario: "
        f"`hangdoctor.scenarios.postload` (launcher + N workers deadlocked on pipes, "
        f"`--weights-mib {WEIGHTS_MIB}`), diagnosed with `--pid LAUNCHER --log LOG`"
    )
    out.append(
        "- floor = window + slowest single `py-spy dump --json` of one worker (of "
        f"{DUMP_SAMPLE}, timed one after another in the same run); SSH floor adds one "
        "asyncssh round trip (connect, auth, `true`, close)"
    )
    out.append(
        "- SSH: loopback OpenSSH sshd, one instance per simulated host (separate "
        "processes and ports, one host key); the remote runs the same Python and py-spy "
        "as here, with a clean HOME (README.md)\n"
    )

    # targets summary
    rows: list[list[str]] = []
    w8 = res.workers.get(8)
    if w8:
        floor = median(w + r.dump_s for r in w8)
        local = median(r.local.m.wall_s for r in w8)
        ratio = median(r.local.m.wall_s / (w + r.dump_s) for r in w8)
        rows.append(
            [
                "local, 8 workers ≤ 1.15 × floor",
                f"{fmt(local)} s = {fmt(ratio)} × floor ({fmt(floor)} s)",
                f"{fmt(TARGET_LOCAL_8 * floor)} s",
                mark(ratio <= TARGET_LOCAL_8),
            ]
        )
        extra = median(r.ssh.m.wall_s - r.local.m.wall_s for r in w8)
        rows.append(
            [
                "SSH, 8 workers ≤ local + 0.5 s",
                f"{fmt(median(r.ssh.m.wall_s for r in w8))} s = local + {fmt(extra)} s",
                f"local + {TARGET_SSH_EXTRA_S} s",
                mark(extra <= TARGET_SSH_EXTRA_S),
            ]
        )
        one = [r for r in w8 if r.manual and r.ssh_one]
        if one:
            ratio = median(r.manual.wall_s / r.ssh_one.m.wall_s for r in one)
            rows.append(
                [
                    "vs manual sequence, 8 workers ≥ 5×, same evidence: one sample of each "
                    "process (`--window 0`)",
                    f"{fmt(median(r.manual.wall_s for r in one))} s manual / "
                    f"{fmt(median(r.ssh_one.m.wall_s for r in one))} s = {fmt(ratio, 1)}×",
                    "≥ 5×",
                    mark(ratio >= TARGET_MANUAL_8),
                ]
            )
        manual = [r.manual.wall_s / r.ssh.m.wall_s for r in w8 if r.manual]
        if manual:
            rows.append(
                [
                    f"the same, hangdoctor with its {w:g} s window (the manual sequence has none)",
                    f"{fmt(median(r.manual.wall_s for r in w8 if r.manual))} s manual / "
                    f"{fmt(median(r.ssh.m.wall_s for r in w8))} s = {fmt(median(manual), 1)}×",
                    "≥ 5×",
                    mark(median(manual) >= TARGET_MANUAL_8),
                ]
            )
    w64 = res.workers.get(64)
    if w64:
        floor = median(w + r.dump_s for r in w64)
        ratio = median(r.local.m.wall_s / (w + r.dump_s) for r in w64)
        rows.append(
            [
                "local, 64 workers ≤ 1.5 × floor",
                f"{fmt(median(r.local.m.wall_s for r in w64))} s = {fmt(ratio)} × floor "
                f"({fmt(floor)} s)",
                f"{fmt(TARGET_LOCAL_64 * floor)} s",
                mark(ratio <= TARGET_LOCAL_64),
            ]
        )
    h16 = res.hosts.get(16)
    if h16:
        ratio = median(a.m.wall_s / b.m.wall_s for a, b in h16)
        rows.append(
            [
                "16 hosts ≤ 2 × one host",
                f"{fmt(median(a.m.wall_s for a, _ in h16))} s vs "
                f"{fmt(median(b.m.wall_s for _, b in h16))} s = {fmt(ratio)}×",
                "≤ 2×",
                mark(ratio <= TARGET_HOSTS_16),
            ]
        )
    out.append("## Targets\n")
    out.append(table(["target", "measured (median)", "limit", "met"], rows) + "\n")

    # local
    rows = []
    for n in sorted(res.workers):
        rs = res.workers[n]
        floor = median(w + r.dump_s for r in rs)
        ratio = median(r.local.m.wall_s / (w + r.dump_s) for r in rs)
        target = _limit_local(n)
        rows.append(
            [
                str(n),
                fmt(median(r.dump_s for r in rs), 3),
                fmt(floor),
                fmt(median(r.local.m.wall_s for r in rs)),
                fmt(1.15 * floor),
                fmt(ratio),
                f"{target:g} ×" if target else "–",
                mark(ratio <= target) if target else "–",
                fmt(median(r.local.m.maxrss_kib / 1024 for r in rs), 1),
                fmt(median(r.local.m.cpu_s for r in rs)),
                ", ".join(sorted({r.local.verdict for r in rs})),
            ]
        )
    out.append("## One host, locally (`hangdoctor diagnose localhost`)\n")
    out.append(
        table(
            [
                "workers",
                "slowest dump (s)",
                "floor (s)",
                "wall (s)",
                "1.15 × floor (s)",
                "wall / floor",
                "target",
                "met",
                "peak RSS (MiB)",
                "CPU (s)",
                "verdict",
            ],
            rows,
        )
    )
    out.append(
        "\npeak RSS: of the hangdoctor process, from `/usr/bin/time -f %M` around it. CPU: user + sys of the "
        "hangdoctor process and its py-spy children (wait4), i.e. the probe's cost on the "
        "target host plus analysis and rendering.\n"
    )

    # ssh
    def ssh_row(label: str, rs: list[WorkerRun], d: Callable[[WorkerRun], Diagnosis]) -> list[str]:
        extra = median(d(r).m.wall_s - r.local.m.wall_s for r in rs)
        return [
            label,
            fmt(median(r.rtt_s for r in rs), 3),
            fmt(median(w + r.dump_s + r.rtt_s for r in rs)),
            fmt(median(d(r).m.wall_s for r in rs)),
            fmt(median(1.15 * (w + r.dump_s) + r.rtt_s for r in rs)),
            fmt(median(r.local.m.wall_s for r in rs)),
            f"+{fmt(extra)}",
            mark(extra <= TARGET_SSH_EXTRA_S),
            fmt(median(d(r).m.maxrss_kib / 1024 for r in rs), 1),
            fmt(median(d(r).remote_cpu_s for r in rs)),
            fmt(median(d(r).remote_total_cpu_s for r in rs)),
            fmt(median((d(r).remote_rss_kib or 0) / 1024 for r in rs), 1),
            ", ".join(sorted({d(r).verdict for r in rs})),
        ]

    rows = [ssh_row(str(n), res.workers[n], lambda r: r.ssh) for n in sorted(res.workers)]
    for n in sorted(res.workers):
        uploaded = [r for r in res.workers[n] if r.upload]
        if uploaded:
            rows.append(ssh_row(f"{n}, py-spy uploaded", uploaded, lambda r: r.upload))
    out.append("## One host over SSH on loopback (`hangdoctor diagnose root@127.0.0.1:PORT`)\n")
    out.append(
        table(
            [
                "workers",
                "SSH round trip (s)",
                "floor + RTT (s)",
                "wall (s)",
                "limit 1.15 × floor + RTT (s)",
                "local wall, same run (s)",
                "SSH − local (s)",
                "≤ local + 0.5 s",
                "peak RSS here (MiB)",
                "remote probe CPU (s)",
                "remote CPU incl. sshd (s)",
                "remote probe peak RSS (MiB)",
                "verdict",
            ],
            rows,
        )
    )
    out.append(
        "\nremote probe CPU / peak RSS: the remote `python3` (the probe) and its py-spy "
        "children, read with `/usr/bin/time` wrapped around the remote interpreter. "
        "Remote CPU incl. sshd: growth of the sshd listener's cutime + cstime over the "
        'run (every reaped session: sshd crypto, shells, probe, py-spy). "py-spy '
        'uploaded": a host without py-spy on PATH, so hangdoctor uploads its own.\n'
    )

    # manual
    rows = []
    for n in sorted(res.workers):
        rs = [r for r in res.workers[n] if r.manual]
        if not rs:
            continue
        ratio = median(r.manual.wall_s / r.ssh.m.wall_s for r in rs)
        one = [r for r in rs if r.ssh_one]
        one_ratio = median(r.manual.wall_s / r.ssh_one.m.wall_s for r in one) if one else None
        same = [r for r in rs if r.manual_same]
        same_text = "–"
        if same:
            same_text = (
                f"{fmt(median(r.manual_same.wall_s for r in same))} s = "
                f"{fmt(median(r.manual_same.wall_s / r.ssh.m.wall_s for r in same), 1)}×"
            )
        rows.append(
            [
                str(n),
                str(_ssh_steps(rs[0].manual)),
                fmt(median(r.manual.wall_s for r in rs)),
                fmt(median(r.ssh_one.m.wall_s for r in one)) if one else "–",
                f"{fmt(one_ratio, 1)}×" if one else "–",
                mark(one_ratio >= TARGET_MANUAL_8) if n == 8 and one else "–",
                fmt(median(r.ssh.m.wall_s for r in rs)),
                f"{fmt(ratio, 1)}×",
                same_text,
            ]
        )
    if rows:
        out.append("## Against the manual sequence (`benchmarks/manual_baseline.sh`)\n")
        out.append(
            table(
                [
                    "workers",
                    "ssh commands",
                    "manual (s)",
                    "hangdoctor over SSH, `--window 0` (s)",
                    "manual / hangdoctor",
                    "≥ 5× (8 workers)",
                    f"hangdoctor over SSH, `--window {w:g}` (s)",
                    "manual / hangdoctor",
                    f"manual with a window too (`-w {w:g}`): time, ratio to `--window {w:g}`",
                ],
                rows,
            )
        )
        out.append(
            "\nmanual: one fresh OpenSSH connection per command, no typing time: `ps` of "
            "the pids, `ss -ltnp`, `py-spy dump` of the launcher and of every worker, "
            "`tail -n 200` of the log (no `nvidia-smi`: no GPU here): one dump per "
            "process, no sampling window. `--window 0` makes hangdoctor collect the same: "
            "one sample of every process (plus environment, threads, NVML and the log "
            f"parsed), no window. With `--window {w:g}` it samples twice, {w:g} s apart; "
            f"the last column gives the manual sequence that too: wait {w:g} s, then `ps` and "
            "every dump again.\n"
        )

    # intrusion
    rows = []
    for n in sorted(res.workers):
        rs = res.workers[n]
        local_p = [p for r in rs for p in pauses_s(r.local.snapshot)]
        ssh_p = [p for r in rs for p in pauses_s(r.ssh.snapshot)]
        dumps = median(len((r.local.snapshot or {}).get("stacks") or {}) for r in rs)
        rows.append(
            [
                str(n),
                fmt(dumps, 0),
                f"{fmt(median(local_p), 3)} / {fmt(max(local_p) if local_p else None, 3)}",
                f"{fmt(median(ssh_p), 3)} / {fmt(max(ssh_p) if ssh_p else None, 3)}",
                fmt(median(r.local.m.cpu_s for r in rs)),
                fmt(median(r.ssh.remote_cpu_s for r in rs)),
            ]
        )
    out.append("## Intrusion on the target\n")
    out.append(
        table(
            [
                "workers",
                "processes dumped",
                "pause per process, local: median / max (s)",
                "pause per process, SSH: median / max (s)",
                "CPU here, local (s)",
                "CPU on the target, SSH probe (s)",
            ],
            rows,
        )
    )
    out.append(
        "\npause per process: 2 dumps × the snapshot's `duration_s` for that process "
        "(the longer of its two dumps, py-spy's whole run), so an upper bound of the time "
        "the process was stopped. CPU here, local: the hangdoctor process with its "
        "py-spy children, including analysis. CPU on the target, SSH: the remote probe "
        "python with its py-spy children (`/usr/bin/time`).\n"
    )

    # hosts
    rows = []
    for n in sorted(res.hosts):
        pairs = res.hosts[n]
        ratio = median(a.m.wall_s / b.m.wall_s for a, b in pairs)
        rows.append(
            [
                str(n),
                fmt(median(a.m.wall_s for a, _ in pairs)),
                fmt(median(b.m.wall_s for _, b in pairs)),
                f"{fmt(ratio)}×",
                mark(ratio <= TARGET_HOSTS_16) if n == 16 else "–",
                fmt(median(a.m.maxrss_kib / 1024 for a, _ in pairs), 1),
                fmt(median(a.m.cpu_s for a, _ in pairs)),
                fmt(median((a.remote_cpu_s or 0) / n for a, _ in pairs)),
                f"{min(a.hosts_ok for a, _ in pairs)} of {n}",
            ]
        )
    if rows:
        out.append("## Several hosts at once over SSH\n")
        out.append(
            table(
                [
                    "hosts",
                    "wall (s)",
                    "one host, same run (s)",
                    "ratio",
                    "≤ 2× (16)",
                    "peak RSS here (MiB)",
                    "CPU here (s)",
                    "remote probe CPU per host (s)",
                    "hosts collected (worst run)",
                ],
                rows,
            )
        )
        out.append(
            "\nhosts: separate sshd processes on 127.0.0.1, one port each, reached through "
            "ssh_config aliases (`--ssh-config`); each host has its own hung server "
            "(launcher + 1 worker, `--pid ALIAS:PID`). All of them share this machine's "
            f"{res.machine.get('nproc')} CPUs, so the remote work of N hosts competes with "
            "itself here.\n"
        )

    # render + start-up
    out.append("## Report rendering and start-up\n")
    rows = []
    if res.render:
        rd = res.render
        rows.append(
            [
                f"`render_html` of the {rd['workers']}-worker analysis ({rd['ranks']} ranks),"
                f" median of {RENDER_REPEATS}",
                f"{fmt(rd['median_s'], 3)} s (first {fmt(rd['first_s'], 3)} s)",
                f"{rd['size_bytes'] / 1024:.0f} KiB HTML "
                f"(analysis JSON {rd['analysis_bytes'] / 1024:.0f} KiB)",
            ]
        )
    st = res.startup
    if st:
        rows.append(
            [
                f"`python -m hangdoctor --help`, median of {STARTUP_REPEATS}",
                f"{fmt(st['help'], 3)} s",
                f"bare `python -c pass` {fmt(st['python'], 3)} s; import cost "
                f"{fmt((st['help'] or 0) - (st['python'] or 0), 3)} s; peak RSS "
                f"{fmt((st['help_rss_kib'] or 0) / 1024, 1)} MiB",
            ]
        )
        rows.append(
            [
                "the same with PYTHONDONTWRITEBYTECODE=1 (no bytecode cache, as in this "
                "dev environment)",
                f"{fmt(st['help_nocache'], 3)} s",
                "",
            ]
        )
    out.append(table(["what", "time", "notes"], rows) + "\n")
    if res.errors:
        out.append("## Problems seen during the run\n")
        out += [f"- {e}" for e in res.errors]
        out.append("")
    return "\n".join(out) + "\n"
