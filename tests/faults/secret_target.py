"""A target that carries secrets everywhere a diagnosis looks, then parks in a pipe wait.

Secrets arrive through the environment and the command line (set by the test); this script
adds two more places: Python locals of the waiting frame (an ``api_key`` and a header dict
holding a bearer token) and log lines written to ``--log``. Prints ``{"pid": ...}`` when ready
and exits on its own after ``--lifetime`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time

LOCAL_API_KEY = "sk-LocalFrameKey7Hq2Zx9Wv4Ub8Tn3Rm"
LOCAL_BEARER = "LocalBearerTok3nQx7Zp2Wy9Vu4Ts8"
LOG_BEARER = "LogBearerTok3nAb1Cd2Ef3Gh4Ij5"
LOG_HF_TOKEN = "hf_LogTokenKq8Jw2Xe5Rt7Yu1Io3Pa6Sd9"


def wait_for_request(lifetime_s: float) -> None:
    """The waiting frame: its locals hold secrets, as a server's request handler would."""
    api_key = LOCAL_API_KEY
    headers = {"Authorization": f"Bearer {LOCAL_BEARER}", "Accept": "application/json"}
    read_fd, _write_fd = os.pipe()
    deadline = time.monotonic() + lifetime_s
    while time.monotonic() < deadline:
        select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
    del api_key, headers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", default=None)
    parser.add_argument("--lifetime", type=float, default=60.0)
    args, _secrets_on_the_command_line = parser.parse_known_args()
    if args.log:
        with open(args.log, "a", encoding="utf-8") as f:
            f.write("INFO server: starting\n")
            f.write(f"DEBUG http: sending request with Authorization: Bearer {LOG_BEARER}\n")
            f.write(f"INFO hub: logged in with {LOG_HF_TOKEN}\n")
            f.write("INFO server: waiting for workers\n")
    print(json.dumps({"pid": os.getpid()}), flush=True)
    sys.stdout.flush()
    wait_for_request(args.lifetime)
    os._exit(0)


if __name__ == "__main__":
    main()
