"""Field knowledge: the mechanism rules and known upstream issues of ``hangdoctor/knowledge``.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from typing import Any

from hangdoctor.checkapi import Signal, against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence
from hangdoctor.knowledge import matcher
from hangdoctor.knowledge.causes import CAUSES

_CAUSES = sorted(CAUSES)


def _summary(m: matcher.Match) -> str:
    text = m.entry["summary"]
    if m.lines:
        line = " ".join(m.lines[0].split())
        text += f" — e.g. `{line[:160]}`"
    return text


def _signals(m: matcher.Match, kind: str, view: matcher.View | None = None) -> list[Signal]:
    e = m.entry
    symptom = bool(e.get("symptom"))
    cap = matcher.SYMPTOM_CAP if symptom else 0.95
    ref = [f"{kind}:{e['id']}"] + (["symptom"] if symptom else []) + (
        ["risk"] if matcher.is_risk_factor(e, m, view) else [])
    out = []
    if float(e["weight"]) > 0:  # a rule may only speak against (weight 0)
        out.append(support(e["cause"], min(cap, float(e["weight"])), _summary(m), refs=list(ref)))
    for a in e.get("also") or []:
        out.append(support(a["cause"], min(cap, float(a["weight"])),
                           a.get("why") or _summary(m), refs=list(ref)))
    for a in e.get("against") or []:
        out.append(against(a["cause"], float(a["weight"]), a["why"], refs=list(ref)))
    return out


def evaluate(ev: Evidence) -> tuple[list[matcher.Match], list[matcher.Match], matcher.View]:
    view = matcher.view_of_evidence(ev)
    return matcher.evaluate(matcher.rules(), view), matcher.evaluate(matcher.known_issues(), view), view


def _known(m: matcher.Match) -> dict[str, Any]:
    e = m.entry
    line = f"this matches {e['project']} #{e['number']}" if e.get("number") else f"this matches {e['project']}"
    if e.get("fixed_in"):
        line += f", fixed in {e['fixed_in']}"
    line += f"; workaround: {e['workaround']}"
    return {"id": e["id"], "title": e["summary"], "project": e["project"], "number": e.get("number"),
            "url": e["url"], "affected": e["affected"], "fixed_in": e.get("fixed_in"),
            "workaround": e["workaround"], "cause": e["cause"], "text": line,
            "experiment": e.get("experiment"),
            "matched": [" ".join(x.split())[:200] for x in m.lines[:3]]}


@check("knowledge.rules", "Field knowledge: mechanism rules and known upstream issues",
       causes=_CAUSES)
def knowledge_rules(ev: Evidence):
    """Evaluates the data in ``hangdoctor/knowledge`` (rules.json, known_issues.json) on every
    line the evidence carries: pasted text, log and kernel lines, stack frames, command lines,
    environments, versions. Each rule names its cause, weight and what speaks against it; a
    known issue links the upstream thread with the versions affected and the workaround.

    Confirm by hand: python -c "from hangdoctor.knowledge import rules; print(len(rules()))"
    """
    rule_hits, issue_hits, view = evaluate(ev)
    env_facts = {"env_facts": view.facts}
    if not rule_hits and not issue_hits:
        return cleared("no rule or known issue matched the evidence", facts=env_facts)
    signals: list[Signal] = []
    for m in rule_hits:
        signals.extend(_signals(m, "rule", view))
    for m in issue_hits:
        sig = _signals(m, "known-issue", view)
        if sig:
            sig[0].text = _known(m)["text"] + f" ({m.entry['summary']})"
        signals.extend(sig)
    names = [m.id for m in rule_hits + issue_hits]
    return fired(f"{len(names)} rule(s) matched: " + ", ".join(names[:8]), *signals,
                 facts={"known_issues": [_known(m) for m in issue_hits],
                        "rules_matched": [m.id for m in rule_hits],
                        "symptoms": [m.id for m in rule_hits if m.entry.get("symptom")],
                        **env_facts})
