"""The redaction corpus target: every form of tests/faults/corpus.py planted in every place a
diagnosis looks, then parked in a pipe wait.

- environment: the test sets ENV_BY_NAME and CORPUS_V<i> = each free-text form;
- argv: ``-m vllm.entrypoints.openai.api_server`` (so discovery finds it), every ARGV flag and
  value, and two free-text forms as ``--note`` values;
- locals of the waiting frame: v<i> = each free-text form, and a header dict;
- its log (``--log``): every free-text form as a line, and a PEM key over five lines;
- an HTTP endpoint on 127.0.0.1 (a listening port of the server: the probe GETs /health)
  whose answer carries some forms.

Prints ``{"pid": ..., "port": ...}`` when ready; exits on its own after ``--lifetime`` s.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import select
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402  (this script's own folder)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = "\n".join(corpus.FREE_TEXT[i][1] for i in corpus.HTTP_BODY_FORMS).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _waiting_frame(lifetime_s: float) -> None:
    """A frame whose locals hold every free-text form (v0, v1, ...) and a header dict."""
    src = ["def hold(lifetime_s):"]
    for i in range(len(corpus.FREE_TEXT)):
        src.append(f"    v{i} = corpus.FREE_TEXT[{i}][1]")
    src += [
        "    headers = {'Authorization': 'Bearer ' + corpus.LOCAL_HEADERS['Authorization'],"
        " 'Cookie': 'a=' + corpus.LOCAL_HEADERS['Cookie']}",
        "    r, _w = os.pipe()",
        "    end = time.monotonic() + lifetime_s",
        "    while time.monotonic() < end:",
        "        select.select([r], [], [], max(0.0, end - time.monotonic()))",
    ]
    scope = {"corpus": corpus, "os": os, "time": time, "select": select}
    exec(compile("\n".join(src), "corpus_target_frame.py", "exec"), scope)
    scope["hold"](lifetime_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", default=None)
    parser.add_argument("--lifetime", type=float, default=120.0)
    args, _planted = parser.parse_known_args()
    if args.log:
        with open(args.log, "a", encoding="utf-8") as f:
            f.write("INFO server: starting\n")
            for _name, text, _secret in corpus.FREE_TEXT:
                f.write(f"INFO {text}\n")
            f.write("DEBUG tls: loaded key\n")
            f.write("\n".join(corpus.PEM_LINES) + "\n")
            f.write("INFO server: waiting for workers\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"pid": os.getpid(), "port": server.server_address[1]}), flush=True)
    _waiting_frame(args.lifetime)
    os._exit(0)


if __name__ == "__main__":
    main()
