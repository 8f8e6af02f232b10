"""The alert rule pack (docs/alerts/hangdoctor.rules.yml) and the Kubernetes manifests
(docs/k8s/*.yaml): parsed without a YAML library (a reader for the plain subset they are kept
in), every rule complete and naming when it cannot fire, every hangdoctor metric it reads one
that watch writes; the rules over watch's own metrics are evaluated here (``firing``) and used
by tests/test_watch_progress.py on real watch output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hangdoctor import watch as watch_mod

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "alerts" / "hangdoctor.rules.yml"


# ------------------------------------------------------------------ a plain-YAML reader


def _lines(text: str) -> list[tuple[int, str]]:
    out = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError(f"tab in indentation: {raw!r}")
        out.append((len(raw) - len(raw.lstrip()), stripped))
    return out


def _scalar(value: str) -> Any:
    if value.startswith('"'):
        return json.loads(value)  # double-quoted: JSON escapes are a subset of YAML's
    if value.startswith("'"):
        assert value.endswith("'"), value
        return value[1:-1].replace("''", "'")
    if value in ("{}", "[]"):
        return {} if value == "{}" else []
    if value[0] in "{[|>&*!%@`":
        raise ValueError(f"not in the plain subset: {value!r}")
    if value.startswith("- ") or ": " in value or " #" in value:
        raise ValueError(f"ambiguous plain scalar (quote it): {value!r}")
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    return {"true": True, "false": False, "null": None}.get(value, value)


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            rest = lines[i][1][2:].lstrip()
            if re.match(r"^[\w.-]+:( |$)", rest):
                lines[i] = (indent + 2, rest)  # a mapping: this is its first key
                item, i = _block(lines, i, indent + 2)
            else:
                item, i = _scalar(rest), i + 1
            items.append(item)
        return items, i
    out: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        key, sep, value = lines[i][1].partition(":")
        if not sep or (value and not value.startswith(" ")) or key in out:
            raise ValueError(f"not a 'key: value' line (or a repeated key): {lines[i][1]!r}")
        value, i = value.strip(), i + 1
        if value:
            out[key] = _scalar(value)
        elif i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][1].startswith("- "))):
            out[key], i = _block(lines, i, lines[i][0])
        else:
            out[key] = None
    return out, i


def load_yaml(text: str) -> list[Any]:
    """Every document of ``text`` (``---`` separated), in the plain subset; raises otherwise."""
    docs = []
    for part in re.split(r"(?m)^---\s*$", text):
        lines = _lines(part)
        if not lines:
            continue
        doc, end = _block(lines, 0, lines[0][0])
        if end != len(lines):
            raise ValueError(f"cannot read from line {lines[end][1]!r} on")
        docs.append(doc)
    return docs


def rules() -> list[dict[str, Any]]:
    (doc,) = load_yaml(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


# ------------------------------------------------------------------ evaluating watch's rules

_SERIES = re.compile(r"^([a-z_:]+)(\{[^}]*\})? (\S+)$")
_EXPR = re.compile(r"^(?P<time>time\(\) - )?(?P<name>hangdoctor_[a-z_]+)(?P<sel>\{[^}]*\})? (?P<op>==|>|<|>=|!=) (?P<num>[\d.]+)$")


def _labels(text: str | None) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', text or ""))


def firing(exposition: str, now: float) -> set[str]:
    """The rules that fire on one scrape of watch's metrics (``for:`` taken as met). Rules over
    ranges (increase, rate) or absence need a history: not evaluated here."""
    series = []
    for line in exposition.splitlines():
        m = _SERIES.match(line)
        if m:
            series.append((m.group(1), _labels(m.group(2)), float(m.group(3))))
    out = set()
    for rule in rules():
        m = _EXPR.match(rule["expr"])
        if not m:
            continue
        want = _labels(m.group("sel"))
        for name, labels, value in series:
            if name != m.group("name") or any(labels.get(k) != v for k, v in want.items()):
                continue
            v = now - value if m.group("time") else value
            num = float(m.group("num"))
            if {"==": v == num, ">": v > num, "<": v < num, ">=": v >= num, "!=": v != num}[m.group("op")]:
                out.add(rule["alert"])
    return out


def exposition(state: str, at: float, pending: bool = False, since: float = 0.0, alive: bool = True) -> str:
    verdict = {"status": {"hung": "critical", "dead": "critical"}.get(state, "ok"), "state": state,
               "health": {"code": None if state == "dead" else 200}, "work_pending": pending,
               "seconds_since_progress": since,
               "processes": [{"pid": 9, "name": "VLLM::Worker", "alive": alive, "cpu_s": 1.0}]}
    return watch_mod.render_metrics("127.0.0.1:8000", watch_mod.Health(state != "hung", "x", verdict), 0, 0.0, at)


# ------------------------------------------------------------------ tests


def test_rule_pack_reads_as_yaml_and_every_rule_is_complete() -> None:
    rs = rules()
    assert len(rs) >= 6
    names = [r["alert"] for r in rs]
    assert len(set(names)) == len(names)
    for r in rs:
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}, r
        assert re.fullmatch(r"\d+[smh]", r["for"]), r
        assert r["labels"]["severity"] in ("critical", "warning"), r
        assert {"summary", "description", "cannot_fire_when"} <= set(r["annotations"]), r
        assert len(r["annotations"]["cannot_fire_when"]) > 30, r


def test_rules_read_only_metrics_that_watch_writes() -> None:
    written = set(watch_mod.METRIC_HELP)
    for r in rules():
        for name in re.findall(r"hangdoctor_[a-z_]+", r["expr"]):
            assert name in written, (r["alert"], name)
        for label in re.findall(r'state="([^"]+)"', r["expr"]):
            assert label in watch_mod.STATE_NAMES, (r["alert"], label)


def test_the_pack_does_not_lean_on_one_gauge() -> None:
    """Hung is watch's verdict over counters, connections and health; a gauge-only rule is
    there too, and says when it cannot fire."""
    by = {r["alert"]: r for r in rules()}
    assert by["InferenceServerHung"]["expr"].startswith("hangdoctor_state")
    gauge = by["InferenceEngineNoProgressByGauges"]
    assert "gauges at 0" in gauge["annotations"]["cannot_fire_when"]


@pytest.mark.parametrize(("state", "pending", "since", "alive", "age_s", "expected"), [
    ("idle", False, 0.0, True, 1, set()),
    ("progressing", True, 0.0, True, 1, set()),
    ("hung", True, 400.0, True, 1, {"InferenceServerHung", "InferenceServerStalling"}),
    ("pending", True, 20.0, True, 1, set()),
    ("dead", False, 0.0, False, 1, {"InferenceServerNotAnswering", "InferenceRankGone"}),
    ("idle", False, 0.0, True, 600, {"HangdoctorWatchSilent"}),
])
def test_each_rule_fires_and_is_ruled_out(state: str, pending: bool, since: float, alive: bool,
                                          age_s: float, expected: set[str]) -> None:
    now = 1_800_000_000.0
    assert firing(exposition(state, now - age_s, pending, since, alive), now) == expected


def test_reader_refuses_what_it_does_not_understand() -> None:
    for bad in ("a: {b: 1}\n", "a: |\n  x\n", "a: b: c\n", "a:b\n", "a: 1\na: 2\n"):
        with pytest.raises(ValueError):
            load_yaml(bad)
    assert load_yaml("a:\n  - b: 1\n    c: \"x: y\"\n  - d\n---\ne: 'it''s'\n") == [
        {"a": [{"b": 1, "c": "x: y"}, "d"]}, {"e": "it's"}]


def test_reader_agrees_with_pyyaml_where_it_is_installed() -> None:
    yaml = pytest.importorskip("yaml")
    for path in [RULES, *sorted((ROOT / "docs" / "k8s").glob("*.yaml"))]:
        text = path.read_text()
        assert load_yaml(text) == [d for d in yaml.safe_load_all(text) if d is not None], path


def test_metrics_survive_a_hostile_process_name_and_keep_every_digit() -> None:
    verdict = {"status": "ok", "state": "idle", "health": {"code": 200}, "work_pending": False,
               "seconds_since_progress": 0.0,
               "processes": [{"pid": 9, "name": 'x"} 1\nevil_metric 1\\', "alive": True, "cpu_s": 2.5}]}
    text = watch_mod.render_metrics('t"\n', watch_mod.Health(True, "x", verdict), 3, 0.0, 1796147664.3208)
    for line in text.splitlines():
        assert line.startswith("# ") or re.match(r'^hangdoctor_[a-z_]+\{(?:[a-z]+="(?:[^"\\]|\\.)*",?)+\} \S+$', line), line
    assert not any(line.startswith("evil_metric") for line in text.splitlines())
    assert "hangdoctor_last_poll_timestamp_seconds{" in text and "} 1796147664.321\n" in text  # ms, not 1.8e+09
    assert 'hangdoctor_incidents_total{target="t\\"\\n"} 3' in text
