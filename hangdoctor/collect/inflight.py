"""Requests in flight on the server's API ports, seen from the kernel's socket table.

An established client connection on the API port whose last bytes came *in* (the request) and
that has sent nothing back since is a request waiting for its answer; one that sends bytes is
being answered (a stream). Read through netlink's sock_diag (what ``ss -ti`` shows: the kernel
keeps, per socket, the milliseconds since data was last sent and received and the byte
counters), at both ends of the window. Read-only: nothing is sent to the server. Where netlink
is refused, ``/proc/net/tcp[6]`` gives the connections without the timings.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import os
import socket
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_INET_DIAG_INFO = 2
_TCP_ESTABLISHED = 1
_MAX_CONNS = 4096  # a busy server has thousands; the report needs counts and a few examples


def _diag_request(family: int) -> bytes:
    # struct inet_diag_req_v2: family, protocol, ext, pad, states, inet_diag_sockid (48 bytes)
    req = (
        struct.pack(
            "=BBBBI",
            family,
            socket.IPPROTO_TCP,
            1 << (_INET_DIAG_INFO - 1),
            0,
            1 << _TCP_ESTABLISHED,
        )
        + b"\0" * 48
    )
    hdr = struct.pack(
        "=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0
    )
    return hdr + req


def _addr(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    return socket.inet_ntop(socket.AF_INET6, raw[:16])


def _tcp_info(data: bytes) -> Dict[str, Any]:
    """The fields of ``struct tcp_info`` (linux/tcp.h) that tell who spoke last."""
    out = {}  # type: Dict[str, Any]
    if len(data) >= 60:
        out["last_data_sent_ms"], _, out["last_data_recv_ms"] = struct.unpack_from("=III", data, 44)
    if len(data) >= 136:
        out["bytes_acked"], out["bytes_received"] = struct.unpack_from("=QQ", data, 120)
    if len(data) >= 208:
        out["bytes_sent"] = struct.unpack_from("=Q", data, 200)[0]
    return out


def _netlink_dump(family: int, ports: set) -> List[Dict[str, Any]]:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
    out = []  # type: List[Dict[str, Any]]
    try:
        s.settimeout(2.0)
        s.sendto(_diag_request(family), (0, 0))
        done = False
        while not done:
            buf = s.recv(1 << 16)
            off = 0
            while off + 16 <= len(buf):
                ln, typ = struct.unpack_from("=IH", buf, off)
                if ln < 16:
                    done = True
                    break
                if typ == _NLMSG_DONE:
                    done = True
                    break
                if typ == _NLMSG_ERROR:
                    err = struct.unpack_from("=i", buf, off + 16)[0]
                    raise OSError(-err, os.strerror(-err))
                msg = buf[off + 16 : off + ln]
                if len(msg) >= 72:
                    fam, state = msg[0], msg[1]
                    sport, dport = struct.unpack_from("!HH", msg, 4)
                    if sport in ports and state == _TCP_ESTABLISHED:
                        rq, wq, uid, inode = struct.unpack_from("=IIII", msg, 56)
                        conn = {
                            "local_port": sport,
                            "peer": "%s:%d" % (_addr(fam, msg[24:40]), dport),
                            "recv_q": rq,
                            "send_q": wq,
                            "inode": inode,
                        }  # type: Dict[str, Any]
                        a = 72
                        while a + 4 <= len(msg):
                            alen, atype = struct.unpack_from("=HH", msg, a)
                            if alen < 4:
                                break
                            if atype == _INET_DIAG_INFO:
                                conn.update(_tcp_info(msg[a + 4 : a + alen]))
                            a += (alen + 3) & ~3
                        if len(out) < _MAX_CONNS:
                            out.append(conn)
                off += (ln + 3) & ~3
    finally:
        s.close()
    return out


def _proc_net(proc: str, ports: set) -> List[Dict[str, Any]]:
    out = []  # type: List[Dict[str, Any]]
    for name in ("tcp", "tcp6"):
        try:
            with open("%s/net/%s" % (proc, name)) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "01":
                continue
            local, peer = parts[1], parts[2]
            lport = int(local.rsplit(":", 1)[1], 16)
            if lport not in ports:
                continue
            tx, rx = parts[4].split(":")
            out.append(
                {
                    "local_port": lport,
                    "peer": "port %d" % int(peer.rsplit(":", 1)[1], 16),
                    "send_q": int(tx, 16),
                    "recv_q": int(rx, 16),
                    "inode": int(parts[9]),
                }
            )
            if len(out) >= _MAX_CONNS:
                return out
    return out


def connections(ports: List[int], proc: str = "/proc") -> Dict[str, Any]:
    """Established connections whose local port is one of ``ports`` (the server side of each
    client connection), with the kernel's per-socket timings when netlink answers."""
    want = set(int(p) for p in ports)
    if not want:
        return {"source": "none", "connections": []}
    if proc == "/proc" and hasattr(socket, "AF_NETLINK"):
        try:
            conns = []  # type: List[Dict[str, Any]]
            for fam in (socket.AF_INET, socket.AF_INET6):
                conns.extend(_netlink_dump(fam, want))
            return {"source": "sock_diag", "connections": conns}
        except OSError as exc:
            fallback = "sock_diag: %s" % exc
    else:
        fallback = None
    return {"source": "proc_net", "connections": _proc_net(proc, want), "note": fallback}
