"""Kernel log view: Xid, OOM kills, AER, segfaults, hung tasks, and the probe's line filter."""

from __future__ import annotations

from pathlib import Path

from hangdoctor.evidence.kernel import KERNEL_LINE_RE, parse_kernel

SAMPLES = Path(__file__).parent / "samples"


def test_dmesg_xid79_and_oom() -> None:
    v = parse_kernel((SAMPLES / "dmesg_xid79_oom.txt").read_text().splitlines())
    assert [(x.code, x.pci, x.pid, x.name) for x in v.xids] == [
        (79, "0000:19:00", 46295, "python3")
    ]
    assert "fallen off the bus" in v.xids[0].text
    # "oom-kill:" summary and "Killed process" are one kill
    assert [(k.pid, k.name) for k in v.oom_kills] == [(46297, "python3")]
    assert v.oom_killed_pids() == {46297}
    assert len(v.aer) == 2 and "AER: Uncorrected (Fatal)" in v.aer[0]
    assert [(h.pid, h.name, h.blocked_s) for h in v.hung_tasks] == [(46301, "python3", 122)]
    assert [(s.pid, s.name) for s in v.segfaults] == [(46302, "python3")]
    assert len(v.nvrm) == 2
    assert len(v.lines) == 11


def test_xid_variants() -> None:
    v = parse_kernel(
        [
            "Nov 29 19:00:01 gpu-node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
            "[Sat Nov 29 19:00:02 2025] NVRM: Xid (PCI:0000:00:1e): 31, Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_bc000000.",
            "[  100.1] NVRM: Xid (PCI:0000:19:00): 119, pid=2222, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
            "[  200.2] Memory cgroup out of memory: Killed process 3333 (python3) total-vm:1kB, anon-rss:1kB",
        ]
    )
    assert [(x.code, x.pci, x.pid, x.name) for x in v.xids] == [
        (48, "0000:3b:00", None, None),
        (31, "0000:00:1e", None, None),
        (119, "0000:19:00", 2222, "python3"),
    ]
    assert [(k.pid, k.name) for k in v.oom_kills] == [(3333, "python3")]


def test_kernel_line_re_keeps_only_relevant() -> None:
    keep = (SAMPLES / "dmesg_xid79_oom.txt").read_text().splitlines()
    drop = [
        "[    0.000000] Linux version 6.1.0-18-amd64",
        "[    1.234567] e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex",
        "[    2.000000] systemd[1]: Started Journal Service.",
    ]
    assert all(KERNEL_LINE_RE.search(x) for x in keep)
    assert not any(KERNEL_LINE_RE.search(x) for x in drop)


def test_empty_and_junk() -> None:
    v = parse_kernel(["", "\x00\xff garbage", "NVRM: Xid (PCI:zz): notanumber"])
    assert v.xids == [] and v.oom_kills == [] and len(v.lines) == 2
