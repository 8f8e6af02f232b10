"""A py-spy wrapper that starts the real py-spy and SIGKILLs it a few milliseconds later.

Used as the ``py-spy`` the probe runs, to check that a py-spy killed mid-dump (by a timeout, by
the OOM killer, by Ctrl-C) never leaves the target stopped or traced. Environment:
  HD_REAL_PYSPY      the real py-spy binary
  HD_KILL_AFTER_MS   delay before the kill, in ms; "A-B" picks one at random (default "1-60")
  HD_KILLER_LOG      optional file: one line per kill, "pid delay_ms returncode"
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time


def main() -> int:
    real = os.environ["HD_REAL_PYSPY"]
    spec = os.environ.get("HD_KILL_AFTER_MS", "1-60")
    low, _, high = spec.partition("-")
    delay_ms = random.uniform(float(low), float(high or low))
    proc = subprocess.Popen(
        [real, *sys.argv[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    time.sleep(delay_ms / 1000.0)
    proc.send_signal(signal.SIGKILL)  # our own child
    rc = proc.wait(timeout=10)
    log = os.environ.get("HD_KILLER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{sys.argv[-1] if sys.argv[1:] else '-'} {delay_ms:.1f} {rc}\n")
    sys.stderr.write(f"Error: py-spy was killed after {delay_ms:.1f} ms (fault injection)\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
