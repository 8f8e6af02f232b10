"""Field accuracy: score ``hangdoctor analyze`` on a corpus of real hang reports.

    python benchmarks/accuracy.py [CORPUS_DIR] [--markdown FILE] [--json] [--subprocess]

A corpus is a folder of cases (``../shared/corpus`` by default), one folder each, with the
evidence files as posted and ``truth.txt`` (line 1: the cause id, or ``other: NAME``; optional
line 2: an acceptable alternative). Each case is analysed as ``hangdoctor analyze <every evidence
file> --json`` would: the same reading, parsing, checks and triage (in-process for speed;
``--subprocess`` runs the CLI itself). Only the evidence files are read; ``source.md`` and
``truth.txt`` never reach the analysis.

Scoring (the corpus README): top-1 when the first ranked cause is line 1 of truth.txt; top-3 when
line 1 or line 2 is among the first three. An ``other: NAME`` case is scored only by its
alternative id (line 2): top-1 when that id is first, top-3 when it is among the first three. NAME
itself never matches, so a cause id named after a case's label earns nothing.

Batches: cases are grouped by the first letter of their folder, two letters a batch (``a+b``,
``c+d``, …), the order in which the corpus grew; each batch and the whole corpus get a row.

``--loso`` (leave one source out): each case is scored with the rules and known issues that were
written from it switched off (their ``written_from`` names the case), so the knowledge is measured
on cases it was not written from.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_CORPUS = os.path.normpath(os.path.join(ROOT, "..", "shared", "corpus"))
# files of a case that are not evidence: the story and the answer
NOT_EVIDENCE = {"source.md", "truth.txt"}
TIME_LIMIT_S = 2.0  # per case, the target
LEVELS = ("high", "medium", "low")


def evidence_files(case_dir: str) -> list[str]:
    return sorted(
        os.path.join(case_dir, f)
        for f in os.listdir(case_dir)
        if f not in NOT_EVIDENCE and not f.startswith(".")
        and os.path.isfile(os.path.join(case_dir, f))
    )


def read_truth(case_dir: str) -> tuple[str, str | None]:
    with open(os.path.join(case_dir, "truth.txt"), encoding="utf-8") as f:
        lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    return lines[0], (lines[1] if len(lines) > 1 else None)


def cases_of(corpus: str) -> list[str]:
    return sorted(
        os.path.join(corpus, d)
        for d in os.listdir(corpus)
        if os.path.isfile(os.path.join(corpus, d, "truth.txt"))
    )


def analyse_in_process(paths: list[str]) -> dict[str, Any]:
    """What ``hangdoctor analyze PATHS --json`` computes, without starting a process."""
    from hangdoctor.parsers.assemble import analyze_inputs, read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.snapshot.io import load_snapshot_text
    from hangdoctor.triage.analyze import analyze

    snapshots: list[dict[str, Any]] = []
    texts: list[tuple[str, str]] = []
    for p in paths:
        name, text = read_input(p)
        if sniff_json_document(text) == "snapshot":
            snapshots.extend(load_snapshot_text(text, name))
        else:
            texts.append((name, text))
    if texts:
        snapshots.append(analyze_inputs(texts))
    return analyze(snapshots, command="hangdoctor analyze " + " ".join(paths))


def analyse_subprocess(paths: list[str]) -> dict[str, Any]:
    exe = os.path.join(os.path.dirname(sys.executable), "hangdoctor")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "hangdoctor"]
    out = subprocess.run(cmd + ["analyze", *paths, "--json"], capture_output=True, text=True,
                         timeout=60)
    if not out.stdout.strip():
        raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()[:300]}")
    return json.loads(out.stdout)


def _matches(cause_id: str, want: str | None) -> bool:
    if want is None or want.startswith("other:"):
        return False  # an 'other:' label is no cause id: only the alternative can match
    return cause_id == want


def batch_of(case: str) -> str:
    """``a+b`` for a case folder starting with a or b, ``c+d`` for c or d, and so on."""
    first = os.path.basename(case)[:1].lower()
    if not ("a" <= first <= "z"):
        return "other"
    i = (ord(first) - ord("a")) // 2 * 2
    return f"{chr(ord('a') + i)}+{chr(ord('a') + i + 1)}"


def score_case(case_dir: str, subprocess_mode: bool = False,
               paths: list[str] | None = None, loso: bool = False) -> dict[str, Any]:
    """One case scored; ``paths`` replaces its evidence files (benchmarks/perturb.py passes
    rewritten copies); ``loso`` switches off the knowledge written from this case."""
    from contextlib import nullcontext

    from hangdoctor.knowledge import matcher

    truth, alt = read_truth(case_dir)
    paths = evidence_files(case_dir) if paths is None else paths
    t0 = time.perf_counter()
    error = None
    analysis: dict[str, Any] = {}
    held = matcher.holding_out([os.path.basename(os.path.normpath(case_dir))]) if loso else nullcontext()
    try:
        with held:
            analysis = analyse_subprocess(paths) if subprocess_mode else analyse_in_process(paths)
    except Exception as e:  # noqa: BLE001 - a crash is a result to report, not a stop
        error = f"{type(e).__name__}: {e}"
    elapsed_s = time.perf_counter() - t0
    causes = analysis.get("causes") or []
    ranked = [(c["id"], c.get("score"), c.get("confidence")) for c in causes]
    ids = [c[0] for c in ranked]
    want1 = alt if truth.startswith("other:") else truth
    top1 = bool(ids) and _matches(ids[0], want1)
    top3 = any(_matches(i, truth) or _matches(i, alt) for i in ids[:3])
    return {
        "case": os.path.basename(case_dir),
        "batch": batch_of(case_dir),
        "truth": truth,
        "alternative": alt,
        "ranked": ranked[:5],
        "confidence": ranked[0][2] if ranked else None,
        "verdict": analysis.get("verdict"),
        "known_issues": [k.get("id") for k in analysis.get("known_issues") or []],
        "experiment": (analysis.get("next_experiment") or {}).get("toggle"),
        "top1": top1,
        "top3": top3,
        "error": error,
        "elapsed_s": round(elapsed_s, 3),
    }


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    per_cause: dict[str, dict[str, int]] = defaultdict(lambda: {"cases": 0, "top1": 0, "top3": 0})
    for r in results:
        pc = per_cause[r["truth"]]
        pc["cases"] += 1
        pc["top1"] += r["top1"]
        pc["top3"] += r["top3"]
    per_level: dict[str, dict[str, int]] = {lv: {"cases": 0, "right": 0} for lv in LEVELS}
    for r in results:
        if r["confidence"] in per_level:
            per_level[r["confidence"]]["cases"] += 1
            per_level[r["confidence"]]["right"] += r["top1"]
    times = sorted(r["elapsed_s"] for r in results)
    batches: dict[str, dict[str, int]] = {}
    for r in results:
        b = batches.setdefault(r.get("batch") or batch_of(r["case"]),
                               {"cases": 0, "top1": 0, "top3": 0, "no_cause": 0})
        b["cases"] += 1
        b["top1"] += r["top1"]
        b["top3"] += r["top3"]
        b["no_cause"] += int(not r["ranked"] and not r["error"])
    return {
        "batches": dict(sorted(batches.items())),
        "cases": n,
        "top1": sum(r["top1"] for r in results),
        "top3": sum(r["top3"] for r in results),
        "crashes": sum(1 for r in results if r["error"]),
        "no_cause": sum(1 for r in results if not r["ranked"] and not r["error"]),
        "per_cause": dict(sorted(per_cause.items())),
        "per_confidence": per_level,
        "max_s": times[-1] if times else 0.0,
        "median_s": times[len(times) // 2] if times else 0.0,
        "over_limit": [r["case"] for r in results if r["elapsed_s"] >= TIME_LIMIT_S],
    }


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100.0 * a / b:.0f} %)" if b else "–"


def markdown(summary: dict[str, Any], results: list[dict[str, Any]], corpus_name: str) -> str:
    s = summary
    out = [
        "| corpus | cases | top-1 | top-3 | no cause | crashes | slowest case | median |",
        "|---|---|---|---|---|---|---|---|",
        f"| {corpus_name} | {s['cases']} | {_pct(s['top1'], s['cases'])} | "
        f"{_pct(s['top3'], s['cases'])} | {s['no_cause']} | {s['crashes']} | {s['max_s']:.2f} s | "
        f"{s['median_s']:.2f} s |",
    ]
    for name, b in (s.get("batches") or {}).items():
        out.append(f"| {name} | {b['cases']} | {_pct(b['top1'], b['cases'])} | "
                   f"{_pct(b['top3'], b['cases'])} | {b['no_cause']} | | | |")
    out += [
        "",
        f"Time per case: {s.get('mode', 'in-process')}"
        + (f", after a start-up of {s['start_up_s']:.2f} s" if s.get("start_up_s") else "") + ".",
        "",
        "| cause (truth) | cases | top-1 | top-3 |",
        "|---|---|---|---|",
    ]
    for cause, pc in s["per_cause"].items():
        out.append(f"| `{cause}` | {pc['cases']} | {pc['top1']} | {pc['top3']} |")
    out += ["", "| confidence of the first cause | cases | first cause right |", "|---|---|---|"]
    for lv in LEVELS:
        pl = s["per_confidence"][lv]
        out.append(f"| {lv} | {pl['cases']} | {_pct(pl['right'], pl['cases'])} |")
    out += ["", "| case | truth | ranked first three |", "|---|---|---|"]
    for r in results:
        if r["top1"]:
            continue
        ranked = ", ".join(f"{i} ({c})" for i, _s, c in r["ranked"][:3]) or "(none)"
        mark = "top-3" if r["top3"] else "miss"
        out.append(f"| {r['case']} | {r['truth']} | {ranked} — {mark} |")
    return "\n".join(out) + "\n"


def warm_up() -> float:
    """Import the checks, the knowledge data and the templates once, so per-case times are the
    analysis itself (``--subprocess`` measures the whole CLI instead); returns the seconds it took."""
    import tempfile

    t0 = time.perf_counter()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("INFO warm-up\n")
    try:
        analyse_in_process([f.name])
    finally:
        os.unlink(f.name)
    return time.perf_counter() - t0


def run(corpus: str, subprocess_mode: bool = False, loso: bool = False,
        batch: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    start_s = 0.0 if subprocess_mode else warm_up()
    cases = [c for c in cases_of(corpus) if batch is None or batch_of(c) == batch]
    results = [score_case(c, subprocess_mode, loso=loso) for c in cases]
    summary = summarise(results)
    summary["start_up_s"] = round(start_s, 3)
    summary["mode"] = ("subprocess (the CLI per case)" if subprocess_mode else "in-process") + (
        ", leave-one-source-out" if loso else "")
    return summary, results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="?", default=DEFAULT_CORPUS)
    ap.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown ('-': stdout)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--subprocess", action="store_true", help="run the hangdoctor CLI per case")
    ap.add_argument("--loso", action="store_true",
                    help="leave one source out: switch off the rules written from the case scored")
    ap.add_argument("--batch", metavar="X+Y", help="score one batch only (a+b, c+d, ...)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.corpus) or not cases_of(args.corpus):
        print(f"accuracy: {args.corpus}: no cases (folders with truth.txt) there", file=sys.stderr)
        return 2
    sys.path.insert(0, ROOT)
    summary, results = run(args.corpus, args.subprocess, loso=args.loso, batch=args.batch)
    if args.json:
        print(json.dumps({"summary": summary, "cases": results}, indent=1))
    else:
        for r in results:
            mark = "ok  " if r["top1"] else "top3" if r["top3"] else "MISS"
            ranked = ", ".join(f"{i}:{s:.2f}/{c}" for i, s, c in r["ranked"][:3]) or "(none)"
            extra = f" ERROR {r['error']}" if r["error"] else ""
            print(f"{mark} {r['elapsed_s']:5.2f}s {r['case'][:60]:60} want {r['truth']:28} "
                  f"got {ranked}{extra}")
        s = summary
        print(f"\ntop-1 {_pct(s['top1'], s['cases'])}  top-3 {_pct(s['top3'], s['cases'])}  "
              f"crashes {s['crashes']}  no cause {s['no_cause']}  slowest {s['max_s']:.2f} s  "
              f"median {s['median_s']:.2f} s  ({s['mode']}; start-up {s['start_up_s']:.2f} s once)")
        for name, b in s["batches"].items():
            print(f"  batch {name}: top-1 {_pct(b['top1'], b['cases'])}  top-3 {_pct(b['top3'], b['cases'])}"
                  f"  no cause {b['no_cause']}")
        for lv in LEVELS:
            pl = s["per_confidence"][lv]
            print(f"  first cause at {lv:6} confidence: right {_pct(pl['right'], pl['cases'])}")
        for cause, pc in s["per_cause"].items():
            print(f"  {cause:34} {pc['top1']}/{pc['cases']} top-1, {pc['top3']}/{pc['cases']} top-3")
        if s["over_limit"]:
            print(f"  over {TIME_LIMIT_S:.0f} s: {', '.join(s['over_limit'])}")
    if args.markdown:
        md = markdown(summary, results, "all" if args.batch is None else args.batch)
        if args.markdown == "-":
            sys.stdout.write(md)
        else:
            with open(args.markdown, "w", encoding="utf-8") as f:
                f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
