"""A loopback server that answers the NCCL RAS client protocol with what a real RAS said.

The answers come from ``tests/fixtures/nccl/ras-h200-transcripts.json`` (recorded on an H200 with
NCCL 2.28.9); ``status_doc`` can replace the STATUS document (e.g. the recorded one with ranks
added). Every line the client sends is recorded in ``received``, so a test can prove that only the
client protocol was ever sent. Like the real server, it closes the connection after STATUS.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def recorded(name: str = "idle_json") -> list[dict[str, Any]]:
    data = json.loads((FIXTURES / "ras-h200-transcripts.json").read_text())
    return data[name]["exchange"]


def recorded_status(name: str = "idle_json") -> dict[str, Any]:
    """The JSON STATUS document of one recorded exchange."""
    body = "".join(e["recv"] for e in recorded(name) if "recv" in e and e["recv"].lstrip().startswith("{"))
    return json.loads(body)


def recorded_text_status() -> str:
    ex = recorded("idle_text")
    return "".join(e["recv"] for e in ex if "recv" in e)[len("SERVER PROTOCOL 2\n"):]


def with_ranks(doc: dict[str, Any], counts: list[dict[str, int]], missing: list[int] = ()) -> dict[str, Any]:
    """The recorded document's communicator widened to ``len(counts)`` ranks (rank r on GPU r)."""
    doc = copy.deepcopy(doc)
    comm = doc["communicators"][0]
    proto = comm["ranks"][0]
    ranks = []
    for r, c in enumerate(counts):
        if r in missing:
            continue
        entry = copy.deepcopy(proto)
        entry.update(rank=r, pid=proto["pid"] + r, cuda_dev=r, nvml_dev=r)
        entry["collective_counts"] = dict(proto["collective_counts"], **c)
        ranks.append(entry)
    comm["ranks"] = ranks
    comm["size"] = len(counts)
    comm["ranks_count"] = len(ranks)
    comm["missing_ranks_count"] = len(missing)
    comm["missing_ranks"] = [{"rank": r, "host": proto["host"], "pid": proto["pid"] + r,
                              "cuda_dev": r, "nvml_dev": r} for r in missing]
    return doc


class RasReplay:
    """``with RasReplay(docs=[doc1, doc2]) as ras: ... ras.port`` — one document per STATUS."""

    def __init__(self, docs: list[dict[str, Any]] | None = None, json_format: bool = True,
                 text: str | None = None, silent: bool = False, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.docs = docs if docs is not None else [recorded_status()]
        self.json_format = json_format
        self.text = text if text is not None else recorded_text_status()
        self.silent = silent
        self.received: list[str] = []
        self.connections = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._served = 0

    def __enter__(self) -> RasReplay:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buf = b""
        fmt_json = False
        try:
            while not self._stop.is_set():
                while b"\n" not in buf:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
                line, _, buf = buf.partition(b"\n")
                text = line.decode("utf-8", "replace")
                self.received.append(text)
                if self.silent:
                    continue
                if text.startswith("CLIENT PROTOCOL"):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif text == "SET FORMAT json":
                    if self.json_format:
                        fmt_json = True
                        conn.sendall(b"OK\n")
                    else:  # what an older RAS answers: an error line, connection kept
                        conn.sendall(b"ERROR: Unknown command SET\n")
                elif text in ("STATUS", "VERBOSE STATUS"):
                    if fmt_json:
                        doc = self.docs[min(self._served, len(self.docs) - 1)]
                        self._served += 1
                        body = json.dumps(doc, indent=2).encode()
                        # in two chunks, as the real server sent long answers
                        conn.sendall(body[: len(body) // 2])
                        conn.sendall(body[len(body) // 2:] + b"\n")
                    else:
                        conn.sendall(self.text.encode())
                    return  # the server closes after its answer
                else:
                    conn.sendall(b"ERROR: Unknown command\n")
        except OSError:
            return
        finally:
            conn.close()
