"""The forced command of the hostile loopback sshd (tests/test_redteam_ssh.py).

sshd runs this instead of whatever hangdoctor asked for (authorized_keys ``command=``). The
behaviour is read from the mode file named on the command line, so one server plays every
part; the command hangdoctor asked for is in ``SSH_ORIGINAL_COMMAND``:

  real       run the command hangdoctor asked for (a normal host)
  braces     a login script gone wrong: N lines of "{" on stdout, then exit
  endless    stdout that never ends (1 MiB writes until the client hangs up)
  escapes    a valid snapshot whose host name and discovery records, and whose stderr, carry
             terminal escape sequences (screen clear, title change, OSC 8 links)
"""

from __future__ import annotations

import json
import os
import sys

ESC_PAYLOAD = (
    "\x1b]0;pwned-title\x07\x1b[2J\x1b[H\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07"
)


def _fast_marks() -> None:
    # what the discovery script prints on the fast path before it runs the probe
    sys.stderr.write("hd_python=/usr/bin/python3\nhd_pyspy=/usr/bin/py-spy\nhd_fast=1\n")
    sys.stderr.flush()


def _drain_stdin() -> None:
    try:
        while os.read(0, 1 << 20):
            pass
    except OSError:
        pass


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        mode = json.load(f)
    kind = mode["mode"]
    if kind == "real":
        os.execv("/bin/sh", ["sh", "-c", os.environ.get("SSH_ORIGINAL_COMMAND", "true")])
    _drain_stdin()
    _fast_marks()
    out = sys.stdout.buffer
    if kind == "braces":
        out.write(b"{\n" * int(mode.get("lines", 60000)))
    elif kind == "endless":
        chunk = b"x" * (1 << 20)
        try:
            while True:
                out.write(chunk)
        except (BrokenPipeError, OSError):
            return
    elif kind == "escapes":
        sys.stderr.write("warning: " + ESC_PAYLOAD + "\n")
        snap = {
            "schema_version": 1,
            "origin": "live",
            "redacted": True,
            "host": {"name": "node" + ESC_PAYLOAD, "hostname": "h" + ESC_PAYLOAD},
            "targets": {
                "root_pids": [],
                "discovered": True,
                "discovery": [
                    {
                        "pid": "7" + ESC_PAYLOAD,
                        "kind": "vllm" + ESC_PAYLOAD,
                        "cmdline": "python -m vllm" + ESC_PAYLOAD,
                    }
                ],
            },
            "processes": [],
            "manifest": [{"source": "processes", "status": "ok", "detail": ESC_PAYLOAD}],
            "notes": ["note" + ESC_PAYLOAD],
        }
        out.write(json.dumps(snap).encode() + b"\n")
    out.flush()


if __name__ == "__main__":
    main()
