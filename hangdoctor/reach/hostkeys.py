"""SSH host keys: what known_hosts vouches for, the refusal of a key it does not (with the
commands that check and accept it), and StrictHostKeyChecking=accept-new's append.

A host key is never accepted silently: an unknown or changed key is one TargetError line that
names both fingerprints and how to verify the host's own key by hand.

Layer: reach; may import: the standard library, asyncssh (through
hangdoctor.reach.asyncssh_import), hangdoctor.errors and hangdoctor.reach.sshconfig.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

from hangdoctor.errors import TargetError
from hangdoctor.reach.asyncssh_import import import_asyncssh
from hangdoctor.reach.sshconfig import Resolved, known_hosts_pattern

asyncssh = import_asyncssh()


def known_keys(resolved: Resolved, addr: str) -> list[asyncssh.SSHKey]:
    """The keys the known_hosts files trust for this host (its name or ``addr``, its port)."""
    keys: list[asyncssh.SSHKey] = []
    port = resolved.port if resolved.port != 22 else None
    for path in resolved.known_hosts:
        if not os.path.exists(path):
            continue
        try:
            trusted = asyncssh.match_known_hosts(path, resolved.host, addr, port)[0]
        except (OSError, ValueError, asyncssh.KeyImportError):
            continue
        keys.extend(trusted)
    return keys


def fingerprint(key: asyncssh.SSHKey) -> str:
    return f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"


def host_key_error(
    name: str, resolved: Resolved, offered: Optional[asyncssh.SSHKey], reason: str
) -> TargetError:
    """The refusal of the key ``offered`` (None: not seen), as an unknown or a CHANGED key."""
    pattern = known_hosts_pattern(resolved.host, resolved.port)
    known_file = resolved.known_hosts[0] if resolved.known_hosts else "~/.ssh/known_hosts"
    known_q = shlex.quote(known_file)
    key_type = offered.get_algorithm() if offered else ""
    scan = (
        f"ssh-keyscan -p {resolved.port}{' -t ' + key_type if key_type else ''} "
        f"{shlex.quote(resolved.host)} >> {known_q}"
    )
    offered_text = fingerprint(offered) if offered else "unknown key"
    known = known_keys(resolved, resolved.host)
    if offered is None:
        return TargetError(
            f"{name}: host key of {pattern} refused ({reason})",
            f"check {known_file}; the host key may be revoked or of a type not offered",
        )
    if known:
        old = ", ".join(fingerprint(k) for k in known)
        return TargetError(
            f"{name}: host key of {pattern} CHANGED: {known_file} has {old}, the host "
            f"now offers {offered_text}; refusing to connect (a reinstalled host, or a "
            f"man in the middle)",
            f"if the change is expected, verify {offered_text} on the host "
            f"(ssh-keygen -lf /etc/ssh/ssh_host_{_short_type(key_type)}_key.pub), then: "
            f"ssh-keygen -R {shlex.quote(pattern)} -f {known_q} && {scan}",
        )
    return TargetError(
        f"{name}: host key of {pattern} is not in {known_file}: the host offers "
        f"{offered_text}; refusing to connect to an unknown host",
        f"verify {offered_text} on the host (ssh-keygen -lf "
        f"/etc/ssh/ssh_host_{_short_type(key_type)}_key.pub), then accept it: {scan}",
    )


def remember_host_key(resolved: Resolved, key: asyncssh.SSHKey) -> Optional[str]:
    """accept-new: add the first key of a new host to known_hosts, as OpenSSH does."""
    if not resolved.known_hosts:
        return None
    path = Path(resolved.known_hosts[0])
    key_text = " ".join(key.export_public_key().decode().split()[:2])
    line = f"{known_hosts_pattern(resolved.host, resolved.port)} {key_text}\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(line)
    except OSError:
        return None  # the connection is still fine; the note says the key was not saved
    return str(path)


def _short_type(key_type: str) -> str:
    # ssh-ed25519 -> ed25519, ecdsa-sha2-nistp256 -> ecdsa, ssh-rsa -> rsa
    if key_type.startswith("ecdsa"):
        return "ecdsa"
    return key_type.replace("ssh-", "") or "*"
