"""Make any snapshot safe for the evidence views: fields of the wrong type are dropped (absent =
unknown), never passed on to crash a check. Applied to every snapshot before analysis, whether
it came from a live probe, a file on disk or the parsers of pasted text.

Layer: snapshot; may import: the standard library, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

from typing import Any

_STR = ("name", "exe", "status", "status_end", "wchan", "role", "rank_source", "exit_info", "env_status", "host")
_INT = ("pid", "ppid", "root_pid", "rank", "num_threads", "uid")
_NUM = ("cpu_delta_s", "cpu_pct", "cpu_time_s", "create_time", "rss_bytes", "vms_bytes", "swap_bytes",
        "read_bytes_delta", "write_bytes_delta", "rchar_delta", "wchar_delta", "ps_cpu_pct")
_BOOL = ("alive", "zombie", "is_python", "is_torch_distributed")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _clean_process(p: dict[str, Any]) -> dict[str, Any] | None:
    if not _is_int(p.get("pid")):
        return None
    out = dict(p)
    for k in _STR:
        if k in out and not isinstance(out[k], str):
            del out[k]
    for k in _INT:
        if k in out and not _is_int(out[k]):
            del out[k]
    for k in _NUM:
        if k in out and not _is_num(out[k]):
            del out[k]
    for k in _BOOL:
        if k in out and not isinstance(out[k], bool):
            del out[k]
    cmd = out.get("cmdline")
    if cmd is not None and not (isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)):
        out["cmdline"] = [str(a) for a in cmd] if isinstance(cmd, list) else []
    env = out.get("env")
    if env is not None:
        out["env"] = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
    for key in ("threads", "listen"):
        val = out.get(key)
        if val is not None:
            out[key] = [x for x in val if isinstance(x, dict)] if isinstance(val, list) else []
    out["listen"] = [s for s in out.get("listen") or [] if _is_int(s.get("port"))]
    for t in out.get("threads") or []:
        for k in ("name", "status", "status_end", "wchan"):
            if k in t and not isinstance(t[k], str):
                del t[k]
        if "cpu_delta_s" in t and not _is_num(t["cpu_delta_s"]):
            del t["cpu_delta_s"]
    return out


def _clean_frames(frames: Any) -> list[dict[str, Any]]:
    out = []
    for f in frames if isinstance(frames, list) else []:
        if not isinstance(f, dict):
            continue
        g = dict(f)
        for k in ("name", "filename", "short_filename"):
            if k in g and not isinstance(g[k], str):
                g[k] = str(g[k]) if g[k] is not None else None
        if "line" in g and not _is_int(g["line"]):
            g["line"] = None
        out.append(g)
    return out


def _clean_stack(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    if not isinstance(out.get("status"), str):
        out["status"] = "failed"
    samples = []
    for s in out.get("samples") if isinstance(out.get("samples"), list) else []:
        if not isinstance(s, dict):
            continue
        threads = []
        for t in s.get("threads") if isinstance(s.get("threads"), list) else []:
            if not isinstance(t, dict):
                continue
            t2 = dict(t)
            t2["frames"] = _clean_frames(t.get("frames"))
            if "name" in t2 and not isinstance(t2["name"], str):
                t2["name"] = str(t2["name"])
            threads.append(t2)
        samples.append(dict(s, threads=threads))
    out["samples"] = samples
    if out["status"] == "ok" and not samples:
        out["status"] = "failed"
    return out


def _clean_gpus(gpus: dict[str, Any]) -> dict[str, Any]:
    out = dict(gpus)
    devices = []
    for d in gpus.get("devices") if isinstance(gpus.get("devices"), list) else []:
        if not isinstance(d, dict):
            continue
        d2 = dict(d)
        if not _is_int(d2.get("index")):
            d2["index"] = len(devices)
        for k in ("mem_total_mib", "power_limit_w"):
            if k in d2 and not _is_num(d2[k]):
                del d2[k]
        d2["samples"] = [{k: v for k, v in s.items() if k == "throttle" or _is_num(v) or isinstance(v, str)}
                         for s in d2.get("samples") or [] if isinstance(s, dict)] if isinstance(d2.get("samples"), list) else []
        d2["processes"] = [p for p in d2.get("processes") or [] if isinstance(p, dict) and _is_int(p.get("pid"))] \
            if isinstance(d2.get("processes"), list) else []
        if not isinstance(d2.get("errors"), dict):
            d2["errors"] = {}
        devices.append(d2)
    out["devices"] = devices
    return out


def _dicts(v: Any) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _clean_nccl(sec: dict[str, Any]) -> dict[str, Any]:
    """The NCCL section (RAS samples, Flight Recorder summaries): lists of dicts all the way down."""
    out = dict(sec)
    for key in ("processes", "ras", "flight_recorder", "fr_requests"):
        out[key] = [dict(x) for x in _dicts(sec.get(key))]
    for p in out["processes"]:
        p["libraries"] = _dicts(p.get("libraries"))
    for r in out["ras"]:
        st = r.get("status")
        if not isinstance(st, dict):
            r.pop("status", None)
            continue
        st = r["status"] = dict(st, communicators=[dict(c) for c in _dicts(st.get("communicators"))])
        for c in st["communicators"]:
            c["missing_ranks"] = _dicts(c.get("missing_ranks"))
            c["ranks"] = [dict(x) for x in _dicts(c.get("ranks"))]
            for rk in c["ranks"]:
                rk["status"] = rk["status"] if isinstance(rk.get("status"), dict) else {}
                counts = rk.get("collective_counts")
                rk["collective_counts"] = ({str(k): v for k, v in counts.items() if _is_int(v)}
                                           if isinstance(counts, dict) else {})
    for d in out["flight_recorder"]:
        summ = d.get("summary")
        if not isinstance(summ, dict):
            d.pop("summary", None)
            continue
        summ = d["summary"] = dict(summ, groups=[dict(g) for g in _dicts(summ.get("groups"))])
        for g in summ["groups"]:
            g["entries"] = _dicts(g.get("entries"))
            g["status"] = g["status"] if isinstance(g.get("status"), dict) else {}
        if not _is_num(d.get("mtime")):
            d.pop("mtime", None)
        if not _is_int(d.get("rank")):
            d["rank"] = None
    return out


def normalize(snap: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``snap`` in which every field the views read has the right type.

    Every string of ``snap`` is first made safe in place (hangdoctor.textsafe.clean_value): lone
    surrogates replaced, bidi overrides (U+202E) removed, so that no output carries them."""
    from hangdoctor.textsafe import clean_value

    s = dict(clean_value(snap))
    if not isinstance(s.get("host"), dict):
        s["host"] = {"name": "?"}
    if not isinstance(s["host"].get("name"), str):
        s["host"] = dict(s["host"], name=str(s["host"].get("name") or "?"))
    if not isinstance(s.get("targets"), dict):
        s["targets"] = {}
    roots = s["targets"].get("root_pids")
    s["targets"] = dict(s["targets"], root_pids=[p for p in roots if _is_int(p)] if isinstance(roots, list) else [])
    raw_procs = s.get("processes") if isinstance(s.get("processes"), list) else []
    raw_stacks = s.get("stacks") if isinstance(s.get("stacks"), dict) else {}
    raw_manifest = s.get("manifest") if isinstance(s.get("manifest"), list) else []
    s["processes"] = [c for c in (_clean_process(p) for p in raw_procs if isinstance(p, dict)) if c]
    s["stacks"] = {str(k): _clean_stack(v) for k, v in raw_stacks.items() if isinstance(v, dict)}
    s["manifest"] = [m for m in raw_manifest if isinstance(m, dict)]
    dropped = (len(raw_procs) - len(s["processes"]) + len(raw_stacks) - len(s["stacks"])
               + len(raw_manifest) - len(s["manifest"]))
    if isinstance(s.get("http"), list):
        dropped += len(s["http"]) - len([h for h in s["http"] if isinstance(h, dict)])
        s["http"] = [h for h in s["http"] if isinstance(h, dict)]
    else:
        s.pop("http", None)
    if dropped:
        notes = s.get("notes") if isinstance(s.get("notes"), list) else []
        s["notes"] = notes + [f"{dropped} malformed entries were dropped from the snapshot"]
    if "nccl" in s:
        if isinstance(s["nccl"], dict):
            s["nccl"] = _clean_nccl(s["nccl"])
        else:
            s.pop("nccl")
    if "gpus" in s:
        if isinstance(s["gpus"], dict):
            s["gpus"] = _clean_gpus(s["gpus"])
        else:
            s.pop("gpus")
    for key, field in (("log", "tail"), ("kernel_log", "lines")):
        if key in s:
            sec = s[key]
            if not isinstance(sec, dict):
                s.pop(key)
                continue
            lines = sec.get(field)
            s[key] = dict(sec, **{field: [x if isinstance(x, str) else str(x) for x in lines] if isinstance(lines, list) else []})
            for k in ("grew_bytes", "age_s", "size_start", "size_end"):
                if k in s[key] and not _is_num(s[key][k]):
                    del s[key][k]
    for key in ("host_memory", "shm", "versions"):
        if key in s and not isinstance(s[key], dict):
            s.pop(key)
    for key in ("host_memory", "shm"):
        if key in s:
            s[key] = {k: v for k, v in s[key].items() if _is_num(v) or isinstance(v, str)}
    if not _is_num(s.get("window_s")):
        s.pop("window_s", None)
    if s.get("origin") not in ("live", "pasted"):
        s["origin"] = "live" if s.get("window_s") else "pasted"
    return s
