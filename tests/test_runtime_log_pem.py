"""A PEM private key printed by a containerised server over many lines (red-team round 2,
R06): `docker logs` is read by hangdoctor itself (not the probe), and was redacted line by line,
so the key's body lines survived. Against a real Docker engine (tests/docker_tools.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from docker_tools import CONTAINER_PYTHON, Engine, docker_engine_fixture  # noqa: F401

from tests.faults.helpers import no_traceback

BODY = [
    "MIIEowIBAAKCAQEAr06bodyLineOneAbCdEfGhIjKlMnOpQrStUvWxYz012345678",
    "R06bodyLineTwoAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijklmno",
    "R06lastShortLine==",
]
SERVER = (
    "import sys, time\n"
    "print('INFO server starting', flush=True)\n"
    "print('-----BEGIN RSA PRIVATE KEY-----', flush=True)\n"
    + "".join(f"print({line!r}, flush=True)\n" for line in BODY)
    + "print('-----END RSA PRIVATE KEY-----', flush=True)\n"
    "print('INFO ready', flush=True)\n"
    "time.sleep(300)\n"
)


def test_r06_a_pem_key_in_docker_logs_keeps_no_body_line(docker_engine: Engine,
                                                         tmp_path: Path) -> None:
    name = docker_engine.run([CONTAINER_PYTHON, "-c", SERVER])
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            logs = docker_engine.docker("logs", name).stdout.decode()
            if "INFO ready" in logs:
                break
            time.sleep(0.2)
        snap = tmp_path / "s.json"
        proc = subprocess.run([sys.executable, "-m", "hangdoctor", "diagnose", f"docker:{name}",
                               "--window", "0", "--no-gpu", "--json", "--save-snapshot",
                               str(snap)], capture_output=True, text=True, timeout=180,
                              env=docker_engine.env)
        no_traceback(proc)
        text = snap.read_text() + proc.stdout + proc.stderr
        tail = json.loads(snap.read_text()).get("log", {}).get("tail") or []
        assert any("INFO ready" in ln for ln in tail), tail  # the log was read
        for line in BODY:
            assert line[:20] not in text, line
    finally:
        docker_engine.docker("rm", "-f", name, check=False)
