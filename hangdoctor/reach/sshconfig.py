"""Parse what the user types for an SSH host: ``[user@]host[:port]`` and ``-o Key=Value``; and
where the connection goes once ~/.ssh/config and those options are applied (:class:`Resolved`).

Pure functions; the connection itself lives in :mod:`hangdoctor.reach.sshconnect`.

Layer: reach; may import: the standard library and hangdoctor.errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hangdoctor.errors import UsageError

# OpenSSH option names we honour from ``-o``, keyed by their lower-case form.
SUPPORTED_OPTIONS = {
    name.lower(): name
    for name in (
        "Port",
        "User",
        "HostName",
        "IdentityFile",
        "StrictHostKeyChecking",
        "UserKnownHostsFile",
        "ConnectTimeout",
        "ProxyJump",
    )
}

HOST_KEY_POLICIES = {
    "yes": "strict",
    "ask": "strict",  # nobody can answer a prompt here: ask means refuse
    "true": "strict",
    "no": "off",
    "off": "off",
    "false": "off",
    "accept-new": "accept-new",
}


@dataclass
class HostSpec:
    """``[user@]host[:port]`` split up; ``host`` may be an ~/.ssh/config alias."""

    host: str
    user: Optional[str] = None
    port: Optional[int] = None


def parse_host(spec: str) -> HostSpec:
    """Split ``[user@]host[:port]`` (IPv6 as ``[addr]:port`` or a bare address)."""
    text = spec.strip()
    if not text:
        raise UsageError("empty host name", "give a host as [user@]host[:port]")
    user: Optional[str] = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not user:
            raise UsageError(f"no user before '@' in {spec!r}", "write user@host or just host")
    port: Optional[int] = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise UsageError(f"unclosed '[' in {spec!r}", "write [addr]:port for IPv6")
        if rest:
            if not rest.startswith(":"):
                raise UsageError(f"unexpected {rest!r} after ']' in {spec!r}")
            port = _parse_port(rest[1:], spec)
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        port = _parse_port(port_text, spec)
    else:
        host = text  # a name, or a bare IPv6 address (several colons, no port)
    if not host:
        raise UsageError(f"no host name in {spec!r}", "give a host as [user@]host[:port]")
    return HostSpec(host=host, user=user, port=port)


def _parse_port(text: str, spec: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise UsageError(f"port {text!r} in {spec!r} is not a number") from None
    if not 0 < port < 65536:
        raise UsageError(f"port {port} in {spec!r} is out of range")
    return port


def parse_ssh_options(options: list[str]) -> dict[str, list[str]]:
    """Parse ``-o`` style options (``Key=Value``, ``Key Value``, ``-oKey=Value``).

    Returns canonical option names to their values in the order given (IdentityFile may
    repeat; for the others the first value wins, as in OpenSSH).
    """
    parsed: dict[str, list[str]] = {}
    for raw in options:
        item = raw.strip()
        if item.startswith("-o"):
            item = item[2:].strip()
        if "=" in item:
            key, _, value = item.partition("=")
        else:
            key, _, value = item.partition(" ")
        key, value = key.strip(), value.strip()
        if not key or not value:
            raise UsageError(f"ssh option {raw!r} is not Key=Value", "e.g. -o Port=2222")
        name = SUPPORTED_OPTIONS.get(key.lower())
        if name is None:
            raise UsageError(
                f"ssh option {key!r} is not supported",
                "supported: "
                + ", ".join(sorted(SUPPORTED_OPTIONS.values()))
                + "; put others in ~/.ssh/config",
            )
        if name == "Port":
            _parse_port(value, raw)
        if name == "ConnectTimeout":
            try:
                float(value)
            except ValueError:
                raise UsageError(f"ConnectTimeout {value!r} is not a number of seconds") from None
        if name == "StrictHostKeyChecking" and value.lower() not in HOST_KEY_POLICIES:
            raise UsageError(
                f"StrictHostKeyChecking={value} is not understood",
                "use yes, no or accept-new",
            )
        parsed.setdefault(name, []).append(value)
    return parsed


def known_hosts_pattern(host: str, port: int) -> str:
    """How OpenSSH writes a host in known_hosts: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


@dataclass
class Resolved:
    """Where the connection goes once ~/.ssh/config and -o options are applied."""

    host: str
    port: int
    user: str
    known_hosts: list[str]  # files; empty when checking is off
    encryption_algs: Optional[list[str]] = None  # our order, where the user set none
