"""How the field accuracy holds when the same evidence is posted another way.

    python benchmarks/perturb.py [CORPUS_DIR] [--markdown FILE]

Real reports reach hangdoctor in many wrappings: pasted into a GitHub comment (fenced, quoted
with ``> ``), copied from a terminal (CRLF, ANSI colours, tabs), scraped from a web page (HTML
entities), from ``docker compose logs`` / ``kubectl logs --timestamps`` / journald (a prefix on
every line), or all in one file. The cause does not change with the wrapping, so neither should
the answer. Each variant rewrites every evidence file of every case the same way and scores top-1
and top-3 as ``benchmarks/accuracy.py`` does; a variant that loses cases names them.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import tempfile
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import accuracy  # noqa: E402


def _lines(f: Callable[[str], str]) -> Callable[[str], str]:
    return lambda text: "\n".join(f(ln) for ln in text.split("\n"))


VARIANTS: dict[str, Callable[[str], str]] = {
    "as posted": lambda t: t,
    "fenced (```)": lambda t: "```\n" + t.rstrip("\n") + "\n```\n",
    "quoted (> )": _lines(lambda ln: "> " + ln),
    "CRLF": lambda t: t.replace("\n", "\r\n"),
    "ANSI colours": _lines(lambda ln: re.sub(r"\b(ERROR|WARNING|INFO|WARN)\b", "\x1b[1;31m\\1\x1b[0m", ln)),
    "HTML entities": lambda t: html.escape(t, quote=False),
    "docker compose prefix": _lines(lambda ln: "vllm-1  | " + ln if ln else ln),
    "kubectl --timestamps": _lines(lambda ln: "2026-11-30T10:01:02.123456789Z " + ln if ln else ln),
    "journald prefix": _lines(lambda ln: "Nov 30 10:01:02 gpu-node-3 python[46294]: " + ln if ln else ln),
    "indented 4": _lines(lambda ln: "    " + ln if ln else ln),
    "compose, coloured": _lines(lambda ln: "\x1b[36mvllm-1  |\x1b[0m " + ln if ln else ln),
    "quoted, fenced": lambda t: "\n".join("> " + ln for ln in ("```\n" + t.rstrip("\n") + "\n```").split("\n")),
    "kubectl, quoted": _lines(lambda ln: "> 2026-11-30T10:01:02Z " + ln),
}


# Semantic rewrites: the same evidence as people re-tell it, not only re-wrapped.
_LEVEL = re.compile(r"\b(?:ERROR|WARN(?:ING)?|CRITICAL|FATAL)\b|Error\b|Exception\b|Traceback|timed? ?out|Killed")


def _summarised(text: str) -> str:
    """What a poster keeps of a long log: the warning and error lines, and the last 15 lines."""
    lines = text.split("\n")
    keep = [ln for ln in lines[:-15] if _LEVEL.search(ln)]
    return "\n".join(keep + ["..."] + lines[-15:])


def _per_rank(text: str) -> str:
    """Labelled per rank by the poster: the evidence given twice, under 'rank 0:' and 'rank 1:'."""
    return "rank 0:\n" + text.rstrip("\n") + "\n\nrank 1:\n" + text


def _annotated(text: str) -> str:
    """The poster's own notes between the lines: a heading and a sentence about where it stops."""
    lines = text.rstrip("\n").split("\n")
    return ("Here is what we see on the node (the server stops answering after this):\n\n"
            + "\n".join(lines) + "\n\nAfter the last line above nothing else is printed, and the GPUs stay idle.\n")


def _tabulated(text: str) -> str:
    """Pasted into a Markdown table, one line a row (as some issue templates ask)."""
    rows = ["| # | output |", "|---|---|"]
    for i, ln in enumerate(text.split("\n")):
        if ln.strip():
            cell = ln.replace("|", "\\|")
            rows.append(f"| {i + 1} | {cell} |")
    return "\n".join(rows) + "\n"


SEMANTIC: dict[str, Callable[[str], str]] = {
    "summarised (errors + last 15)": _summarised,
    "labelled per rank": _per_rank,
    "annotated by the poster": _annotated,
    "tabulated (Markdown rows)": _tabulated,
}
VARIANTS.update(SEMANTIC)


def one_file(case: str, out: str) -> None:
    """All evidence of a case in one file, each part under its file name (one paste)."""
    with open(out, "w", encoding="utf-8") as f:
        for p in accuracy.evidence_files(case):
            with open(p, encoding="utf-8", errors="replace") as src:
                f.write(f"\n{os.path.basename(p)}:\n{src.read()}\n")


def score(corpus: str, transform: Callable[[str], str] | None, merged: bool = False) -> tuple[int, int, list[str]]:
    top1 = top3 = 0
    lost: list[str] = []
    for case in accuracy.cases_of(corpus):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            if merged:
                path = os.path.join(tmp, "report.txt")
                one_file(case, path)
                paths = [path]
            else:
                for p in accuracy.evidence_files(case):
                    with open(p, encoding="utf-8", errors="replace") as src:
                        text = src.read()
                    dst = os.path.join(tmp, os.path.basename(p))
                    with open(dst, "w", encoding="utf-8", newline="") as f:
                        f.write(transform(text) if transform else text)
                    paths.append(dst)
            r = accuracy.score_case(case, paths=paths)
        top1 += r["top1"]
        top3 += r["top3"]
        if not r["top1"] and not r["truth"].startswith("other:"):  # "other:" cases miss everywhere
            first = r["ranked"][0][0] if r["ranked"] else "none"
            lost.append(os.path.basename(case)[:3] + ":" + first)
    return top1, top3, lost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", default=accuracy.DEFAULT_CORPUS)
    ap.add_argument("--markdown", help="write the table to this file")
    args = ap.parse_args()
    n = len(accuracy.cases_of(args.corpus))
    rows = ["| posted as | top-1 | top-3 | cases lost against as-posted |", "| --- | --- | --- | --- |"]
    base: set[str] = set()
    runs = [(name, f, False) for name, f in VARIANTS.items()] + [("one file, all parts", None, True)]
    for name, f, merged in runs:
        t1, t3, lost = score(args.corpus, f, merged)
        if name == "as posted":
            base = set(lost)
        extra = sorted(set(lost) - base)
        rows.append(f"| {name} | {t1}/{n} | {t3}/{n} | {', '.join(extra) or '—'} |")
        print(rows[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
