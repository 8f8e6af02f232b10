"""Environment dumps (``env``, ``printenv``, ``/proc/PID/environ | tr '\\0' '\\n'``,
``export``/``declare -x`` lines, docker-inspect ``"KEY=VALUE",`` lists), redacted::

    NCCL_P2P_DISABLE=1
    export HF_TOKEN=hf_...            -> [REDACTED]
    declare -x CUDA_VISIBLE_DEVICES="0,1"

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable

from hangdoctor.parsers.text import clip_lines
from hangdoctor.redact import redact_env

ENV_LINE = re.compile(
    r"^\s*(?:export\s+|declare\s+-x\s+|-\s+|\"|')?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<val>.*)$"
)


def parse_env_line(line: str) -> tuple[str, str] | None:
    """(key, value) of one env line, or None."""
    m = ENV_LINE.match(line)
    if not m:
        return None
    val = m.group("val").rstrip()
    if val.endswith('",') or val.endswith("',"):
        val = val[:-2]
    elif val.endswith(",") and line.lstrip().startswith(('"', "'")):
        val = val[:-1]
    if len(val) >= 2 and val[0] == val[-1] and val[0] in "\"'":
        val = val[1:-1]
    elif line.lstrip().startswith(('"', "'")) and val[-1:] in "\"'":
        val = val[:-1]
    return m.group("key"), val


def parse_env(lines: Iterable[str]) -> dict:
    """KEY=VALUE lines into a redacted dict (later lines win)."""
    env: dict = {}
    for raw in clip_lines(lines):
        for part in raw.split("\x00"):
            kv = parse_env_line(part.rstrip("\r\n"))
            if kv:
                env[kv[0]] = kv[1]
    return redact_env(env)
