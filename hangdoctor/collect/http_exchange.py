"""One HTTP/1.0 exchange with a server's port, within one time budget.

The ``/health`` probe, the ``GET /metrics`` reads and the opt-in canary all send one request to
an API port and read the answer. One time budget covers the connect, the send and every read: a
server that trickles a byte every 0.5 s kept a per-read timeout waiting for minutes. The answer
is read up to a size cap, or until ``enough`` says the caller has what it needs.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import re
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional, Sequence, Tuple

_STATUS = re.compile(rb"HTTP/\d(?:\.\d)?\s+(\d{3})")


def request(method: str, path: str, host: str, headers: Sequence[str] = (),
            body: Optional[bytes] = None) -> bytes:
    """The bytes of one request; a body gets its JSON type and length."""
    head = ["%s %s HTTP/1.0" % (method, path), "Host: %s" % host, "User-Agent: hangdoctor"]
    head += list(headers)
    if body is not None:
        head += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")


def exchange(
    host: str,
    port: int,
    data: bytes,
    timeout_s: float,
    max_bytes: int,
    enough: Optional[Callable[[bytes], bool]] = None,
) -> Tuple[bytes, Optional[str], bool]:
    """(what came back, the error or None, whether a connection was made). Errors read
    ``connect failed: …``, ``no answer within N s``, ``request failed: …``."""
    import socket  # here: most hung servers never opened their port, and the probe starts sooner

    t0 = time.monotonic()
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return b"", "connect failed: %s" % exc, False
    end = t0 + timeout_s
    got = b""
    try:
        sock.settimeout(max(0.05, end - time.monotonic()))
        sock.sendall(data)
        chunk_size = min(max_bytes, 1 << 16)
        while len(got) < max_bytes:
            left = end - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            sock.settimeout(left)
            chunk = sock.recv(chunk_size)
            if not chunk:
                break
            got += chunk
            if enough is not None and enough(got):
                break
    except socket.timeout:
        return got, "no answer within %.1f s" % timeout_s, True
    except OSError as exc:
        return got, "request failed: %s" % exc, True
    finally:
        sock.close()
    return got, None, True


def status(data: bytes) -> Tuple[Optional[int], bytes, bytes]:
    """(the status code or None when it is no HTTP answer, the head, the body)."""
    head, _, body = data.partition(b"\r\n\r\n")
    m = _STATUS.match(head)
    return (int(m.group(1)) if m else None), head, body
