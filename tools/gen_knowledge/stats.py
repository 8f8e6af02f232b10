"""python -m tools.gen_knowledge.stats: counts of the committed files as Markdown tables
(per package, per wait class, per phase, per message kind and event), for the docs."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

GEN = Path(__file__).resolve().parents[2] / "hangdoctor" / "knowledge" / "generated"


def _table(head: tuple[str, ...], rows: list[tuple]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def report(gen: Path = GEN) -> str:
    w = json.loads((gen / "wait_points.json").read_text(encoding="utf-8"))
    m = json.loads((gen / "messages.json").read_text(encoding="utf-8"))
    wps, msgs = w["wait_points"], m["messages"]
    pkgs = sorted({(s["package"], s["version"], s["origin"]) for s in w["sources"] + m["sources"]})
    wc = Counter((x["package"], x["version"]) for x in wps)
    mc = Counter((x["package"], x["version"]) for x in msgs)
    parts = [f"{len(wps)} wait points, {len(msgs)} messages.", "",
             _table(("package", "version", "origin", "wait points", "messages"),
                    [(p, v[:12], o.split(":")[0], wc[(p, v)], mc[(p, v)]) for p, v, o in pkgs]), ""]
    by_class = Counter(x["wait_class"] for x in wps)
    native = Counter(x["wait_class"] for x in wps if x["native"])
    parts += [_table(("wait class", "wait points", "of them native"),
                     [(k, n, native[k]) for k, n in sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0]))]), ""]
    kinds = Counter(x["kind"] for x in msgs)
    parts += [_table(("message kind", "messages"), sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))), ""]
    ev = Counter((x["event"], x["kind"]) for x in msgs)
    causes: dict[str, set[str]] = {}
    for x in msgs:
        causes.setdefault(x["event"], set()).update(c["cause"] for c in x["causes"])
    parts += [_table(("event", "kind", "messages", "causes"),
                     [(e, k, n, ", ".join(sorted(causes[e])) or "-")
                      for (e, k), n in sorted(ev.items(), key=lambda kv: (-kv[1], kv[0]))])]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(report())
