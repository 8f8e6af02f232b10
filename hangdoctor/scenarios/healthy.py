"""Scenario "healthy, idle server".

An HTTP server (uvicorn-like log lines) answers ``GET /health`` (200) and ``GET /v1/models``
(200, JSON) while ``--workers`` worker processes sit idle, blocked on a pipe waiting for
requests. From inside, the workers look exactly like a deadlock; the answering port is what tells
the two apart.

Run: ``python3 -m hangdoctor.scenarios.healthy --port 0 --log /tmp/x.log
--ready-file /tmp/ready.json`` (port 0 picks a free port; the ready file names it).

Layer: scenarios; may import: the standard library, torch and hangdoctor.scenarios (each runs as
its own program).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

from hangdoctor.scenarios._plumbing import (
    LogWriter,
    add_common_args,
    become_launcher,
    become_worker,
    collect_status,
    find_free_port,
    start_worker,
    write_ready_file,
)

MODULE = "hangdoctor.scenarios.healthy"


def build_parser() -> argparse.ArgumentParser:
    """Options of the server and its workers."""
    p = argparse.ArgumentParser(prog=f"python3 -m {MODULE}", description=__doc__.split("\n")[0])
    add_common_args(p)
    p.add_argument("--workers", "--tensor-parallel-size", dest="workers", type=int, default=2)
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    # Loopback only: tests never serve beyond this machine.
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default="demo-org/tiny-llama-1b")
    p.add_argument("--api-key", default=None, help="accepted and ignored (redaction tests)")
    return p


def run_worker(args: argparse.Namespace) -> int:
    """Report idle, then wait for requests that never come (EOF: the server is gone)."""
    become_worker(args.launcher_pid, args.max_lifetime)
    status = Connection(args.status_fd, readable=False)
    requests = Connection(args.wait_fd, writable=False)
    status.send({"status": "reached", "rank": args.rank, "pid": os.getpid(), "state": "idle"})
    while True:
        try:
            requests.recv()
        except EOFError:
            return 0


def _make_handler(model: str, log: LogWriter) -> type[BaseHTTPRequestHandler]:
    """Request handler answering the health and model-list endpoints."""
    models_body = json.dumps(
        {
            "object": "list",
            "data": [{"id": model, "object": "model", "owned_by": "hangdoctor-demo"}],
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""
        timeout = 5  # a stuck client must not pin a handler thread forever

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path == "/health":
                self._reply(200, b"", "text/plain")
            elif self.path == "/v1/models":
                self._reply(200, models_body, "application/json")
            else:
                self._reply(404, b'{"detail":"Not Found"}', "application/json")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            # HTTPStatus prints as "HTTPStatus.OK" before Python 3.11: log the number.
            status = int(code) if isinstance(code, int) else code
            phrase = {200: "OK", 404: "Not Found"}.get(status, "")
            host, port = self.client_address[:2]
            log.line(f'INFO:     {host}:{port} - "{self.requestline}" {status} {phrase}'.rstrip())

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.line("WARNING:  " + (format % args))

    return Handler


def run_launcher(args: argparse.Namespace) -> int:
    """Start idle workers, then serve HTTP until the lifetime ends."""
    become_launcher(args.max_lifetime)
    log = LogWriter(args.log)
    log.line(f"INFO:     Started server process [{os.getpid()}]")
    log.line("INFO:     Waiting for application startup.")
    master_port = find_free_port()
    status_readers: list[Connection] = []
    request_writers: list[Connection] = []
    procs = []
    for rank in range(args.workers):
        status_r, status_w = Pipe(duplex=False)
        req_r, req_w = Pipe(duplex=False)
        worker_args = [
            "--max-lifetime",
            str(args.max_lifetime),
            "--status-fd",
            str(status_w.fileno()),
            "--wait-fd",
            str(req_r.fileno()),
        ]
        procs.append(
            start_worker(
                MODULE,
                rank,
                args.workers,
                master_port,
                worker_args,
                (status_w.fileno(), req_r.fileno()),
            )
        )
        status_w.close()
        req_r.close()
        status_readers.append(status_r)
        request_writers.append(req_w)
    try:
        collect_status(status_readers, "reached", args.workers, timeout_s=60.0)
    except (TimeoutError, RuntimeError) as e:
        print(f"healthy: workers did not start: {e}", file=sys.stderr)
        return 1

    server = ThreadingHTTPServer((args.host, args.port), _make_handler(args.model, log))
    server.daemon_threads = True
    port = int(server.server_address[1])
    log.line("INFO:     Application startup complete.")
    log.line(f"INFO:     Uvicorn running on http://{args.host}:{port} (Press CTRL+C to quit)")
    time.sleep(0.3)  # let the workers settle inside recv()
    write_ready_file(
        args.ready_file,
        {
            "scenario": "healthy",
            "launcher_pid": os.getpid(),
            "worker_pids": [p.pid for p in procs],
            "ranks": {str(p.pid): rank for rank, p in enumerate(procs)},
            "log": os.path.abspath(args.log) if args.log else None,
            "port": port,
            "host": args.host,
            "master_port": master_port,
            "max_lifetime_s": args.max_lifetime,
        },
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        del request_writers, procs
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: server by default, worker with ``--worker``."""
    args = build_parser().parse_args(argv)
    return run_worker(args) if args.worker else run_launcher(args)


if __name__ == "__main__":
    sys.exit(main())
