"""Triage: from check results to ranked causes and an overall verdict (report/MODEL.md).

Scoring: each cause's signals combine like independent pieces of evidence. The support is
``1 - prod(1 - w)`` over signals for it, then each signal against it multiplies by ``1 - |w|``.
So two moderate signals beat one, and a strong counter-signal (the port answers) sinks a
cause whatever spoke for it.

Layer: triage; may import: hangdoctor.triage, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.engines, hangdoctor.knowledge, hangdoctor.snapshot, hangdoctor.parsers and the
foundation.
"""

from __future__ import annotations

import datetime
import hashlib
from collections import defaultdict
from typing import Any

from hangdoctor import __version__
from hangdoctor.checkapi.api import CLEARED, ERRORED, FIRED, SKIPPED, Check
from hangdoctor.checkapi.registry import all_checks
from hangdoctor.checkapi.runner import Outcome, run_checks
from hangdoctor.evidence.model import MIB, Evidence
from hangdoctor.knowledge.causes import CAUSES, title
from hangdoctor.triage import differential

MIN_SCORE = 0.05
SYMPTOM_CAP = 0.2  # the most that downstream symptoms alone can score for a cause


def score_causes(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    acc: dict[str, dict[str, Any]] = defaultdict(lambda: {"for": [], "against": [], "odd": []})
    for o in outcomes:
        if o.result.verdict not in (FIRED, CLEARED):
            continue
        for s in o.result.signals:
            if s.cause is None:
                continue
            item = {"text": s.text, "check": o.check.id, "weight": round(abs(s.weight), 3), "refs": s.refs}
            if s.weight > 0:
                acc[s.cause]["for"].append(item)
                acc[s.cause]["odd"].extend(s.odd)
            elif s.weight < 0:
                acc[s.cause]["against"].append(item)
    out = {}
    for cause, a in acc.items():
        support = 1.0
        for item in a["for"]:
            support *= 1.0 - min(0.99, item["weight"])
        score = 1.0 - support
        for item in a["against"]:
            score *= 1.0 - min(0.99, item["weight"])
        a["score"] = round(score, 3)
        a["for"].sort(key=lambda i: -i["weight"])
        a["against"].sort(key=lambda i: -i["weight"])
        out[cause] = a
    return out


def _confidence(score: float) -> str:
    return "high" if score >= 0.7 else "medium" if score >= 0.4 else "low"


def _symptom_only(items: list[dict[str, Any]]) -> bool:
    """Every signal for the cause is a downstream symptom (a line that only says someone is
    stuck: a shm broadcast warning, an RPC or round timeout, EngineDeadError)."""
    return bool(items) and all("symptom" in (i.get("refs") or []) for i in items)


def rank_confidence(causes: list[dict[str, Any]], ev: Evidence) -> None:
    """How much the evidence shows, per ranked cause (``causes`` is sorted, best first).

    high: a strong score that clearly leads the next cause; medium: a mechanism that speaks for
    it; low: weak, close to the runner-up, or only downstream symptoms. One sample (pasted
    evidence, ``--window 0``) cannot show movement, so without a window "high" also needs two
    independent checks, or one known issue, behind it.
    """
    for i, c in enumerate(causes):
        nxt = causes[i + 1]["score"] if i + 1 < len(causes) else 0.0
        level = _confidence(c["score"])
        if level == "high" and c["score"] - nxt < 0.2:
            level = "medium"
        if level == "high" and not ev.has_timing:
            checks = {e["check"] for e in c["evidence"]}
            known = any(any(str(r).startswith("known-issue:") for r in e.get("refs") or []) for e in c["evidence"])
            if len(checks) < 2 and not known:
                level = "medium"
        if c.get("symptom_only"):
            level = "low"
        c["confidence"] = level


_STORAGE_RULES = ("rule:storage.", "rule:lock.network-fs", "rule:python.file-lock-wait", "rule:load.")
_STORAGE_WORDS = ("file system", "/proc/locks", "uninterruptible sleep", "loading", "weights", "blocked for more than")


def _experiment_facts(ev: Evidence, causes: list[dict[str, Any]]) -> dict[str, Any]:
    """What the evidence says about the things experiments toggle, so that an experiment is
    proposed only where the evidence touches what it toggles (knowledge/experiments.json's
    ``when``): more than one rank, a GPU, storage (a file system, a file lock, loading), a FIFO,
    a compilation. Pasted evidence that cannot tell counts as touching (ranks, GPUs)."""
    live = ev.origin == "live"
    ranked = {r.rank for r in ev.ranks if r.rank is not None}
    multi = len(ranked) > 1 or len(ev.workers) > 1 or not live
    texts = [(e.get("text") or "", [str(x) for x in e.get("refs") or []], e.get("check"))
             for c in causes if c["id"] in ("io-stall", "lock-contention") for e in c.get("evidence") or []]
    fifo = any("FIFO" in text for text, _refs, _check in texts)
    storage = any(any(r.startswith(_STORAGE_RULES) for r in refs) or check == "kernel.log"
                  or any(w in text for w in _STORAGE_WORDS) for text, refs, check in texts)
    return {"exp_multi_rank": multi, "exp_gpu": bool(ev.gpus) or not live, "exp_fifo": fifo,
            "exp_storage": storage, "exp_compile": any(c["id"] == "compile-in-progress" for c in causes)}


def choose_experiment(causes: list[dict[str, Any]], facts: dict[str, Any],
                      known: list[dict[str, Any]] | None = None,
                      engine: str | None = None) -> dict[str, Any] | None:
    """The one A/B toggle that best tells the leading hypotheses apart (knowledge/experiments.json):
    it confirms one of the top two and speaks against the other; else it tests the first. A known
    issue behind the first cause names its own test (its fix, tried once). The toggle is said in
    the engine's own flags when the experiment has them (``toggle_by_engine``), else in general
    terms: a plain torch.distributed job has no ``--tensor-parallel-size``."""
    from hangdoctor.knowledge import matcher

    if not causes:
        return None
    top = [c["id"] for c in causes[:3]]
    view = matcher.View(facts={**(facts or {}), **({"engine": engine} if engine else {})})
    named = [k.get("experiment") for k in known or [] if k.get("cause") == top[0] and k.get("experiment")]
    best, best_score = None, 0
    for e in matcher.experiments():
        if named and e["id"] == named[0]:
            best, best_score = e, 999
            break
        if e.get("when") and not matcher.holds(e["when"], view, []):
            continue
        if e.get("unless") and matcher.holds(e["unless"], view, []):
            continue  # already tried (e.g. NCCL_P2P_DISABLE=1 is set)
        conf, out = set(e["confirms"]), set(e["rules_out"])
        score = 0
        if top[0] in conf:
            score = 2
            if len(top) > 1 and top[1] in out:
                score = 4
        elif len(top) > 1 and top[1] in conf and top[0] in out:
            score = 3
        elif any(t in conf for t in top[1:]):
            score = 1
        # between equals, the toggle aimed at fewer causes says more
        score = score * 10 - len(conf) if score else 0
        if score > best_score:
            best, best_score = e, score
    if best is None:
        return None
    between = [t for t in top[:2] if t in best["confirms"] or t in best["rules_out"]]
    toggle = (best.get("toggle_by_engine") or {}).get(engine or "") or best["toggle"]
    return {"id": best["id"], "toggle": toggle, "between": between,
            "if_fixed": best["if_fixed"], "if_not": best["if_not"]}


def _fill(step: str, ev: Evidence, odd: list[dict[str, Any]]) -> str:
    pid = None
    if odd:
        pid = odd[0].get("pid")
    if pid is None and ev.workers:
        pid = ev.workers[0].pid
    port = None
    for p in ev.processes:
        if p.env.get("MASTER_PORT"):
            port = p.env["MASTER_PORT"]
            break
    if port is None:
        for h in ev.http:
            port = h.get("port")
            break
    return (step.replace("{pid}", str(pid) if pid is not None else "PID")
            .replace("{port}", str(port) if port is not None else "PORT"))


def merge_facts(outcomes: list[Outcome]) -> dict[str, Any]:
    facts: dict[str, Any] = {"moving": [], "still": [], "answering": None, "dead": None}
    for o in outcomes:
        f = o.result.facts
        if not f:
            continue
        facts["moving"].extend(f.get("moving", []))
        facts["still"].extend(f.get("still", []))
        if f.get("answering") is not None:  # any host answering counts
            facts["answering"] = bool(facts["answering"]) or bool(f["answering"])
        if f.get("dead") is not None:
            facts["dead"] = f["dead"] if facts["dead"] is None else (facts["dead"] and f["dead"])
        for k, v in f.items():
            if k not in facts:
                facts[k] = v
    return facts


def decide_verdict(ev: Evidence, facts: dict[str, Any], causes: list[dict[str, Any]]) -> tuple[str, str]:
    top = causes[0] if causes else None
    if not ev.processes and not ev.has("stacks") and not ev.has("log") and not ev.has("kernel_log") and not ev.gpus:
        return "inconclusive", "no evidence about the server was collected or given"
    if not ev.processes and ev.origin == "live":
        return "inconclusive", ("no server process was found or given: nothing to diagnose on "
                                + ", ".join(sorted({(s.get('host') or {}).get('name', '?') for s in ev.snapshots})))
    if facts.get("dead"):
        return "dead", facts.get("dead_reason") or "the server's root process is gone or a zombie"
    # --- engine progress (issue 13): work in flight without progress is hung, /health or not
    from hangdoctor.triage.engine_verdict import engine_verdict

    by_engine = engine_verdict(facts)
    if by_engine is not None:
        return by_engine
    # --- end engine progress
    if ev.has_timing:
        from hangdoctor.triage.live_verdict import live_verdict

        by_window = live_verdict(facts, ev.window_s or 0.0, causes)
        if by_window is not None:
            return by_window
    strong_hang = top is not None and top["score"] >= 0.5 and CAUSES.get(top["id"], None) is not None and CAUSES[top["id"]].hang
    if facts.get("answering") and not (strong_hang and top["id"] in ("frontend-hang", "request-deadlock", "nccl-desync", "rank-died", "gpu-fault")):
        return "healthy", facts.get("answering_reason") or "the server answers its health endpoint"
    if top is not None and top["id"] == "compile-in-progress" and top["score"] >= 0.3:
        return "progressing", "compilation is making progress: " + "; ".join(facts["moving"][:3] or [top["summary"]])
    if ev.has_timing:
        if facts["moving"] and not strong_hang:
            return "progressing", "moving over %.1f s: %s" % (ev.window_s or 0, "; ".join(facts["moving"][:3]))
        alive = [p for p in ev.processes if p.alive]
        if not alive:
            return "dead", "no process of the server is alive"
        port = "not answering" if facts.get("answering") is False else "no port open"
        if facts.get("answering") is False and not any(h.get("port") for h in ev.http):
            port = "no port open"
        still = "; ".join(facts["still"][:3]) if facts["still"] else "nothing moved"
        if strong_hang or not facts["moving"]:
            return "hung", f"alive, {port}, {still} over {ev.window_s:.1f} s"
        return "progressing", "moving: " + "; ".join(facts["moving"][:3])
    # pasted evidence or a live --window 0: one sample, movement cannot be judged
    no_window = ("one live sample (--window 0) has no sampling window" if ev.origin == "live"
                 else "pasted evidence has no sampling window")
    if top is not None and top["score"] >= 0.4:
        return "hung", f"the evidence matches {top['id']}; {no_window}, so 'hung' is inferred, not measured"
    return "inconclusive", f"too little evidence to tell hung from slow ({no_window}); see 'next command'"


def _rank_rows(ev: Evidence) -> list[dict[str, Any]]:
    rows = []
    shown = {(r.host, r.pid) for r in ev.ranks}
    others = [p for p in ev.processes if (p.host, p.pid) not in shown]
    entries = [(r.proc, r) for r in ev.ranks] + [(p, None) for p in others]
    for p, r in entries:
        stack = ev.stacks.get((p.host, p.pid))
        main = stack.main if stack and stack.ok else None
        g = ev.gpu_of_pid.get((p.host, p.pid))
        gpu = g[0] if g else None
        cmd = p.cmdline_text
        rows.append({
            "host": p.host, "pid": p.pid, "ppid": p.ppid, "rank": p.rank, "role": p.role,
            "name": p.name, "cmdline": cmd if len(cmd) <= 160 else cmd[:157] + "...",
            "gpu": gpu.index if gpu else None, "state": p.state, "wchan": p.wchan,
            "cpu_pct": p.cpu_pct, "cpu_delta_s": p.cpu_delta_s,
            "rss_mib": round(p.rss_bytes / MIB, 1) if p.rss_bytes else None,
            "threads": p.num_threads,
            "gpu_util_pct": gpu.series("util_pct") if gpu else [],
            "gpu_power_w": gpu.series("power_w") if gpu else [],
            "gpu_mem_mib": g[1] if g else None,
            "top_frame": main.top.short if main and main.top else None,
            "wait_kind": main.wait_kind if main else None,
            "signature": main.signature if main else None,
            "alive": p.alive,
            "is_worker": r is not None,
            "moved": stack.moved if stack else None,
        })
    return rows


def _stack_groups(ev: Evidence) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for r in ev.ranks:
        if not r.stack or not r.stack.ok or not r.stack.main:
            continue
        m = r.stack.main
        g = groups.setdefault(m.signature, {
            "signature": m.signature, "count": 0, "pids": [], "ranks": [], "hosts": [],
            "wait_kind": m.wait_kind, "odd": False,
            "frames": [{"name": f.name, "file": f.file, "line": f.line, "native": f.native} for f in m.frames],
        })
        g["count"] += 1
        g["pids"].append(r.pid)
        g["ranks"].append(r.rank)
        g["hosts"].append(r.host)
    out = sorted(groups.values(), key=lambda g: -g["count"])
    if len(out) > 1:
        # the odd ones out: every group smaller than the largest (a tie names no one)
        biggest = out[0]["count"]
        for g in out:
            g["odd"] = g["count"] < biggest
    return out


def _stacks_all(ev: Evidence) -> dict[str, Any]:
    out = {}
    for (host, pid), ps in ev.stacks.items():
        key = str(pid) if len(ev.snapshots) == 1 else f"{host}:{pid}"
        if not ps.ok:
            out[key] = {"status": ps.status, "error": ps.error, "threads": []}
            continue
        out[key] = {"status": "ok", "moved": ps.moved, "threads": [
            {"thread": t.name, "tid": t.tid, "active": t.active, "wait_kind": t.wait_kind,
             "frames": [{"name": f.name, "file": f.file, "line": f.line, "native": f.native} for f in t.frames]}
            for t in ps.threads]}
    return out


def _gpus(ev: Evidence) -> list[dict[str, Any]]:
    out = []
    for g in ev.gpus:
        out.append({
            "host": g.host, "index": g.index, "name": g.raw.get("name"),
            "mem_total_mib": g.raw.get("mem_total_mib"),
            "util_pct": g.series("util_pct"), "power_w": g.series("power_w"),
            "mem_used_mib": g.series("mem_used_mib"), "power_limit_w": g.power_limit_w,
            "pids": g.pids, "reading": g.reading(), "lost": g.lost,
            "unsupported": g.raw.get("unsupported") or [],
        })
    return out


def _env_diff(ev: Evidence) -> list[dict[str, Any]]:
    ranks = [r for r in ev.ranks if r.proc.env]
    if len(ranks) < 2:
        return []
    keys = sorted({k for r in ranks for k in r.proc.env})
    skip = {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "CUDA_VISIBLE_DEVICES", "HOSTNAME",
            "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK",
            "SLURM_PROCID", "SLURM_LOCALID"}
    out = []
    for k in keys:
        if k in skip:
            continue
        vals = {}
        for r in ranks:
            label = f"rank {r.rank}" if r.rank is not None else f"pid {r.pid}"
            if len(ev.snapshots) > 1:
                label = f"{r.host} {label}"
            vals[label] = r.proc.env.get(k, "(unset)")
        if len(set(vals.values())) > 1:
            out.append({"key": k, "values": vals})
    return out


def _weakened(ev: Evidence) -> list[str]:
    out = []
    if not ev.has_timing:
        out.append("no sampling window (pasted evidence): movement of CPU, log, GPU power and stacks "
                   "cannot be judged, so 'hung' versus 'slow' is inferred, not measured")
    if not ev.has("stacks"):
        out.append("no Python stacks: what each worker waits on is unknown")
    if not ev.gpus:
        out.append("no GPU samples: GPU-side causes (NCCL waits, spinning kernels, faults) rest on other evidence")
    if not ev.has("log"):
        out.append("no server log: loading, compile and request history are unknown")
    if ev.origin != "live" and not ev.processes:
        out.append("no process list: dead or missing ranks cannot be counted")
    # what the collector or the parsers wanted said (py-spy not uploaded, a file cut short, ...)
    for snap in ev.snapshots:
        host = (snap.get("host") or {}).get("name", "?")
        for note in snap.get("notes") or []:
            if isinstance(note, str) and note:
                out.append(note if len(ev.snapshots) == 1 else f"{host}: {note}")
    return out


_HELPERS = ("resource_tracker", "semaphore_tracker", "forkserver")


def _is_helper(cmdline: Any) -> bool:
    text = " ".join(map(str, cmdline)) if isinstance(cmdline, list) else str(cmdline or "")
    return any(h in text for h in _HELPERS)


def _next_command(ev: Evidence, verdict: str, causes: list[dict[str, Any]] | None = None) -> str:
    hosts = [(s.get("host") or {}).get("name", "HOST") for s in ev.snapshots]
    host = hosts[0] if hosts and hosts[0] else "HOST"
    # multiprocessing's helpers (started by the server, often without its pid in a paste)
    # are roots of their own, never the server to diagnose
    roots = [r for r in ev.roots if not _is_helper(r.raw.get("cmdline"))] or ev.roots
    pid = f" --pid {roots[0].pid}" if roots else " --pid PID"
    if ev.origin != "live":
        return (f"hangdoctor diagnose {host if host not in ('pasted', '?') else 'HOST'}{pid} --window 10 "
                "-o report.html   # live, on the host: adds timing, GPU samples and every worker's stack")
    if verdict == "healthy":
        # a command first (the report shows it after a prompt), why in its comment
        return (f"hangdoctor diagnose {host}{pid} --window 10 -o report.html   # nothing to do now; "
                "if clients still hang, run this while a request hangs")
    if verdict in ("progressing", "inconclusive"):
        return f"hangdoctor diagnose {host}{pid} --window 30 -o report.html   # a longer window tells slow from stuck"
    # --- issue 17: the next command follows what was already collected (--native, a GPU).
    native_done = any(isinstance(e, dict) and e.get("native")
                      for s in ev.snapshots for e in (s.get("stacks") or {}).values())
    strong = bool(causes) and causes[0]["score"] >= 0.5
    # a log that was found (and was empty) is not one to ask for again
    log_found = any((s.get("log") or {}).get("path") for s in ev.snapshots if isinstance(s.get("log"), dict))
    if not ev.has("log") and not strong and not log_found:
        return (f"hangdoctor diagnose {host}{pid} --log /path/to/server.log -o report.html"
                "   # the server's log: give its path")
    if not native_done:
        why = ("native frames show where CUDA/NCCL waits" if ev.gpus
               else "native frames show the C call each thread is blocked in")
        return f"hangdoctor diagnose {host}{pid} --native -o report.html   # {why}"
    steps = [st for c in (causes or [])[:1] for st in c.get("next_steps") or []]
    if steps:
        return steps[0]
    return f"hangdoctor diagnose {host}{pid} --native --window 30 -o report.html   # a longer window"
    # --- end issue 17


# --- issue 17: no NCCL advice for a job without NCCL (gloo on CPU)
def _uses_nccl(ev: Evidence) -> bool:
    """A rank with PyTorch's NCCL watchdog or NCCL's own threads, or a GPU: else (gloo on
    CPU, pasted evidence without either) NCCL settings cannot be what to change."""
    if ev.gpus:
        return True
    for p in ev.processes:
        if any(str(t.get("name") or "").startswith(("NCCL", "pt_nccl_")) for t in p.threads or []
               if isinstance(t, dict)):
            return True
    for ps in ev.stacks.values():
        if ps.ok and any(t.name.startswith(("NCCL", "pt_nccl_")) for t in ps.threads):
            return True
    return ev.origin != "live" and not ev.processes  # a paste without processes: cannot tell


def _backend_steps(ev: Evidence, steps: tuple[str, ...]) -> list[str]:
    if _uses_nccl(ev):
        return list(steps)
    out = []
    for st in steps:
        if "NCCL" in st.split("#")[0]:
            if st.startswith("TORCH_NCCL_TRACE"):
                out.append("TORCH_DISTRIBUTED_DEBUG=DETAIL  # rerun: every collective is checked "
                           "against the other ranks' (gloo and NCCL)")
            continue  # no NCCL in this job: its settings cannot be what to change
        out.append(st)
    return out
# --- end issue 17


def analyze(snapshots: list[dict[str, Any]], checks: list[Check] | None = None,
            command: str | None = None, host_results: list[Any] | None = None) -> dict[str, Any]:
    """Run every check over the snapshots and build the analysis document."""
    from hangdoctor.snapshot.normalize import normalize

    problems: list[str] = []
    if checks is None:
        checks, problems = all_checks()
    snapshots = [normalize(s) for s in snapshots if isinstance(s, dict)]
    ev = Evidence(snapshots)
    outcomes = run_checks(checks, ev)
    scored = score_causes(outcomes)
    facts = merge_facts(outcomes)

    causes = []
    # one sample may leave every cause weak: when nothing reaches MIN_SCORE, the causes that
    # something spoke for are still ranked (low), never an empty list after a check fired
    keep = {cid for cid, a in scored.items() if a["for"] and a["score"] >= MIN_SCORE}
    if not keep:
        keep = {cid for cid, a in scored.items() if a["for"] and a["score"] > 0}
    for cid, a in scored.items():
        if cid not in keep:
            continue
        odd = []
        seen = set()
        for o in a["odd"]:
            key = (o.get("host"), o.get("pid"))
            if key not in seen:
                seen.add(key)
                odd.append(o)
        c = CAUSES.get(cid)
        # several downstream symptoms together are still only symptoms; so is what the evidence
        # shows to be the consequence of the stop (a death that follows the timeout it raised)
        symptom_only = _symptom_only(a["for"]) or any("consequence" in (i.get("refs") or []) for i in a["against"])
        score = min(a["score"], SYMPTOM_CAP) if symptom_only else a["score"]
        causes.append({
            "id": cid, "title": title(cid), "score": score, "confidence": _confidence(score),
            "symptom_only": symptom_only,
            "summary": a["for"][0]["text"],
            "evidence": a["for"], "against": a["against"],
            "next_steps": [_fill(s, ev, odd) for s in _backend_steps(ev, c.next_steps if c else ())],
            "odd_ones_out": odd,
        })
    # where the evidence stands (phase, waits, errors): the differential's priors; a cause only
    # risk factors speak for is a risk, never a cause alone
    obs = differential.observe(ev)
    prior = differential.prior_signals(obs)
    risks = differential.set_risks_apart(causes, prior)
    steps = lambda cid: [_fill(x, ev, []) for x in _backend_steps(ev, CAUSES[cid].next_steps if cid in CAUSES else ())]  # noqa: E731
    if not causes:
        causes.extend(differential.prior_causes(prior, scored, MIN_SCORE, steps))
    else:
        # weak mechanisms and where the evidence stands, together: the position raises a cause a
        # mechanism named and adds the ones it points to, below them
        differential.join_priors(causes, prior, scored, MIN_SCORE, steps)
    # a cause that only downstream symptoms speak for ranks below every mechanism
    causes.sort(key=lambda c: (c["symptom_only"] or bool(c.get("prior")), -c["score"], c["id"]))
    differential.order_by_explanation(causes, MIN_SCORE)
    rank_confidence(causes, ev)
    for c in causes:
        if c.get("prior"):
            c["confidence"] = "low"

    ruled_out = []
    for cid, a in scored.items():
        if cid not in keep and a["against"]:
            ruled_out.append({"id": cid, "title": title(cid), "by": [i["text"] for i in a["against"][:3]]})
    # causes no check could speak to
    spoken = set(scored)
    not_checked = []
    for cid in CAUSES:
        if cid in spoken:
            continue
        relevant = [o for o in outcomes if cid in o.check.causes]
        missing = sorted({m for o in relevant if o.result.verdict == SKIPPED for m in o.result.missing})
        if relevant and all(o.result.verdict in (SKIPPED, ERRORED) for o in relevant):
            not_checked.append({"id": cid, "title": title(cid), "missing": missing})
        elif relevant:
            ruled_out.append({"id": cid, "title": title(cid),
                              "by": ["nothing speaks for it: " + ", ".join(sorted({o.check.id for o in relevant if o.result.verdict in (FIRED, CLEARED)}))]})
    ruled_out.sort(key=lambda r: r["id"])

    verdict, reason = decide_verdict(ev, facts, causes)
    prose_n = sum(len(i.get("lines") or []) for s in ev.snapshots for i in s.get("pasted_prose") or []
                  if isinstance(i, dict))
    if not causes and obs.empty and ev.origin != "live" and prose_n:
        verdict, reason = "inconclusive", (
            f"found no evidence: {prose_n} line(s) read as a person's writing (context, never matched as a "
            "log), and no stack, error, log phase or program output to read")
    if (verdict in ("healthy", "progressing") and ev.has_timing) or facts.get("stopped"):
        # a measured window outranks a position; so does a process of the tree that was stopped
        # (state T): the others wait because of it, not where their waits usually point
        causes = [c for c in causes if not c.get("prior")]
    if verdict == "healthy" and causes:
        # a healthy (or idle) server lists no causes: what spoke for one is kept among the
        # ruled-out, with what it said (a risk stays visible, it does not lead)
        for c in causes:
            ruled_out.append({"id": c["id"], "title": c["title"],
                              "by": [f"healthy: {reason}", "it spoke: " + c["summary"]]})
        causes = []
    elif verdict == "progressing" and facts.get("moving"):
        # measured progress: a weak hang cause is noise beside it (kept among the ruled-out)
        weak = [c for c in causes if c["score"] < 0.5 and (CAUSES.get(c["id"]) is None or CAUSES[c["id"]].hang)]
        for c in weak:
            ruled_out.append({"id": c["id"], "title": c["title"],
                              "by": ["something moves: " + "; ".join(facts["moving"][:2]), "it spoke: " + c["summary"]]})
        causes = [c for c in causes if c not in weak]
    stopped = facts.get("stopped") or []
    if stopped and verdict in ("hung", "inconclusive"):
        reason += (f"; {len(stopped)} process(es) are stopped (state T: SIGSTOP, Ctrl-Z or a debugger): "
                   "`kill -CONT PID` resumes them, if stopping them was not intended")
    top = causes[0] if causes else None
    if top:
        headline = f"Most likely {top['id']} (score {top['score']:.2f}): {top['summary']}"
    elif verdict == "healthy":
        headline = "Healthy: the server answers and no cause of a hang was found"
    else:
        headline = "No cause stands out; see what could not be checked and the next command"

    checks_out = []
    for o in outcomes:
        checks_out.append({
            "id": o.check.id, "title": o.check.title, "verdict": o.result.verdict,
            "summary": o.result.summary, "missing": o.result.missing, "error": o.result.error,
            "signals": [s.to_dict() for s in o.result.signals],
        })

    hosts = []
    for i, s in enumerate(snapshots):
        h = s.get("host") or {}
        hr = host_results[i] if host_results and i < len(host_results) else None
        hosts.append({
            "name": h.get("name"), "hostname": h.get("hostname"), "kernel": h.get("kernel"),
            "root_pids": (s.get("targets") or {}).get("root_pids", []),
            "collected_at": s.get("collected_at"), "duration_s": s.get("probe_duration_s"),
            "status": "ok" if not s.get("probe_error") else "failed",
            "error": s.get("probe_error"),
            "discovered": (s.get("targets") or {}).get("discovery", []),
        })
        if hr is not None and getattr(hr, "error", None):
            hosts[-1]["status"] = "partial"
    for hr in host_results or []:
        if getattr(hr, "snapshot", None) is None:
            hosts.append({"name": hr.name, "status": "failed", "error": hr.error, "remedy": hr.remedy,
                          "duration_s": round(hr.duration_s, 3), "root_pids": []})

    collection = []
    for m in ev.manifest:
        collection.append({k: m.get(k) for k in ("host", "source", "status", "duration_s", "detail", "remedy")})
    for hr in host_results or []:
        if getattr(hr, "snapshot", None) is None:
            collection.append({"host": hr.name, "source": "host", "status": "failed", "duration_s": round(hr.duration_s, 3),
                               "detail": hr.error, "remedy": hr.remedy})

    log_meta = ev.log_meta
    log_out = None
    if ev.has("log"):
        lv = ev.log
        log_out = {
            "path": log_meta.get("path"), "grew_bytes": log_meta.get("grew_bytes"), "age_s": log_meta.get("age_s"),
            "tail": list(lv.lines[-60:]),
            "events": [{"kind": e.kind, "text": e.text[:300], "line": e.line_no, "rank": e.rank}
                       for e in lv.events[-80:]],
        }

    host_facts = []
    for host, hm in ev.host_memory:
        shm = dict(ev.shm).get(host) or {}
        host_facts.append({
            "host": host,
            "mem_total_mib": round((hm.get("mem_total_bytes") or 0) / MIB),
            "mem_available_mib": round((hm.get("mem_available_bytes") or 0) / MIB),
            "swap_used_mib": round(((hm.get("swap_total_bytes") or 0) - (hm.get("swap_free_bytes") or 0)) / MIB),
            "swap_in_pages_delta": hm.get("swap_in_pages_delta"), "swap_out_pages_delta": hm.get("swap_out_pages_delta"),
            "shm_total_mib": round((shm.get("total_bytes") or 0) / MIB) if shm else None,
            "shm_free_mib": round((shm.get("free_bytes") or 0) / MIB) if shm else None,
        })

    n_dumped = sum(1 for ps in ev.stacks.values() if ps.ok)
    most = max((len(ps.samples) for ps in ev.stacks.values() if ps.ok), default=0)
    dumps = ("one dump" if most <= 1 else "two dumps, at the start and the end of the window" if most == 2
             else f"{most} dumps: the window's start, its end and {most - 2} in between")
    intrusion = ("read-only: /proc reads, NVML queries and an HTTP GET of the server's own port; "
                 f"py-spy paused each of {n_dumped} Python process(es) for a few milliseconds per dump "
                 f"({dumps}); no signal was sent") if n_dumped else \
        "read-only: /proc reads, NVML queries and an HTTP GET of the server's own port; no process was paused"
    if ev.origin == "pasted":
        intrusion = "none: analysis of pasted evidence"
    else:  # issue 13: the /metrics GETs, and whether the opt-in canary was sent
        from hangdoctor.triage.engine_verdict import intrusion_note

        intrusion += intrusion_note(ev)

    return {
        "analysis_version": 1,
        "tool": {"name": "hangdoctor", "version": __version__},
        "generated_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "command": command,
        "origin": ev.origin,
        "window_s": ev.window_s,
        "hosts": hosts,
        "verdict": verdict,
        "verdict_reason": reason,
        "headline": headline,
        "causes": causes,
        "risks": risks,
        "split": ({"between": [causes[0]["id"], causes[1]["id"]],
                   "observe": differential.split_between(causes[0]["id"], causes[1]["id"])}
                  if len(causes) >= 2 and verdict != "healthy" else None),
        "position": {"phase": obs.phase, "phase_line": obs.phase_line,
                     "waits": {w: {"frame": p.frame, "pids": p.pids} for w, p in obs.positions.items()},
                     "errors": obs.errors},
        "ruled_out": ruled_out,
        "not_checked": not_checked,
        "checks": checks_out,
        "ranks": _rank_rows(ev),
        "stack_groups": _stack_groups(ev),
        "stacks": _stacks_all(ev),
        "gpus": _gpus(ev),
        "env_diff": _env_diff(ev),
        "host_facts": host_facts,
        "log": log_out,
        "collection": collection,
        "weakened": _weakened(ev),
        "known_issues": facts.get("known_issues") or [],
        # a healthy server has no hang to split: no toggle to try (seen: "lsof on the lock file"
        # proposed for an idle vLLM that answered)
        "next_experiment": None if verdict == "healthy" else choose_experiment(
            causes, {**(facts.get("env_facts") or {}), **_experiment_facts(ev, causes)},
            facts.get("known_issues"), engine=ev.engine.name),
        "environment": facts.get("environment") or {},
        "next_command": _next_command(ev, verdict, causes),
        "intrusion": intrusion,
        "problems": problems,
        "facts": {"moving": facts["moving"], "still": facts["still"], "answering": facts["answering"]},
        "fingerprint": hashlib.sha1(",".join(c["id"] for c in causes[:3]).encode()).hexdigest()[:8],
    }
