"""What could not be collected, and why: permission problems explained with their remedy.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import Signal, check, cleared, fired


@check("collection.permissions", "Permissions: ptrace, /proc environ, kernel log", causes=[])
def collection_permissions(ev):
    """py-spy needs ptrace (root or the process owner; in containers ``CAP_SYS_PTRACE``; Yama
    ``ptrace_scope``), ``/proc/PID/environ`` needs the same user, and the kernel log may be
    restricted (``kernel.dmesg_restrict``). Each denial is a finding with the exact remedy;
    the rest of the diagnosis goes on without that evidence.

    Confirm by hand: cat /proc/sys/kernel/yama/ptrace_scope; capsh --print | grep sys_ptrace; dmesg | head -1
    """
    signals = []
    for m in ev.manifest:
        if m.get("status") == "denied":
            text = f"{m.get('source')} on {m.get('host')}: {m.get('detail') or 'permission denied'}"
            if m.get("remedy"):
                text += f" — {m['remedy']}"
            signals.append(Signal(None, 0.0, text))
    if signals:
        return fired(signals[0].text, *signals)
    return cleared("no source was refused for lack of permission")
