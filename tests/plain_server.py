"""A plain HTTP server (no inference engine) for the probe and watch tests, run as its own
process: ``python plain_server.py PORT_FILE LOG_FILE FLAG_DIR``.

It logs one line per request (as uvicorn does), and its behaviour follows flag files in
FLAG_DIR, which the test creates and removes:
- ``GET /health``: 200; 503 while ``sick`` exists; answers after 1.5 s while ``slow`` exists;
- ``GET /work``: logs ``work started``, then waits while ``block`` exists (a request that never
  finishes), then logs ``work done``;
- ``GET /stream?s=N``: N seconds of work that logs a line every 0.1 s (busy and healthy).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PORT_FILE, LOG_FILE, FLAGS = sys.argv[1], sys.argv[2], sys.argv[3]
_lock = threading.Lock()


def log(line: str) -> None:
    with _lock, open(LOG_FILE, "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def flag(name: str) -> bool:
    return os.path.exists(os.path.join(FLAGS, name))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def _answer(self, code: int, body: bytes = b"ok\n") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        if url.path == "/health":
            if flag("slow"):
                time.sleep(1.5)
            self._answer(503 if flag("sick") else 200)
        elif url.path == "/work":
            log("work started")
            while flag("block"):
                time.sleep(0.05)
            log("work done")
            self._answer(200)
        elif url.path == "/stream":
            end = time.monotonic() + float(parse_qs(url.query).get("s", ["3"])[0])
            while time.monotonic() < end:
                log("token")
                time.sleep(0.1)
            self._answer(200)
        else:
            self._answer(404, b"no\n")

    def log_message(self, fmt: str, *args: object) -> None:
        log('%s - "%s"' % (self.address_string(), fmt % args))


def main() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    tmp = PORT_FILE + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(httpd.server_address[1]))
    os.replace(tmp, PORT_FILE)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
