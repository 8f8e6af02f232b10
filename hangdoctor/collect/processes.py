"""Which processes to look at and what each one is: discovery of inference servers, and the
per-process reader that samples /proc at both ends of the window.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import os
import re

from hangdoctor import redact
from hangdoctor.collect import procfs, pyspy, sources
from hangdoctor.collect.config import ProbeConfig

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# Command lines that mark an inference server (or a distributed job) when no --pid is given.
SERVER_PATTERNS = [
    ("vllm", re.compile(r"\bvllm\b|vllm\.entrypoints|VllmWorker|EngineCore")),
    ("sglang", re.compile(r"\bsglang\b|sglang\.launch_server|sglang::")),
    ("tgi", re.compile(r"text-generation-launcher|text-generation-server")),
    ("trtllm", re.compile(r"tensorrt_llm|trtllm-serve|\btrtllm\b")),
    ("triton", re.compile(r"\btritonserver\b")),
    ("torchrun", re.compile(r"\btorchrun\b|torch\.distributed\.(run|launch)")),
    ("lmdeploy", re.compile(r"\blmdeploy\b")),
    ("hangdoctor-scenario", re.compile(r"hangdoctor\.scenarios\.")),
]
_RANK_PATTERNS = [
    re.compile(r"(?:^|[\s_:-])TP(\d+)\b"),
    re.compile(r"\brank[=_ ](\d+)\b", re.IGNORECASE),
]
_LAUNCHERS = re.compile(r"\btorchrun\b|torch\.distributed\.(run|launch)\b|\bdeepspeed\b.*--launcher|"
                        r"torch/distributed/(run|launch)\.py")
_COMPILER_NAMES = re.compile(r"^(nvcc|ptxas|cicc|cudafe\+\+|fatbinary|nvlink|gcc|g\+\+|cc1plus|ld)$")
_TORCH_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop", "pt_tcpstore_uv", "pt_nccl_watchdg",
                  "pt_nccl_heartbt", "pt_autograd")



# ---------------------------------------------------------------- discovery


def kernel_threads(proc: str = "/proc") -> set:
    """kthreadd (pid 2, parent 0) and its children: every kernel thread, from one file. Empty
    where pid 2 is something else (a container's own pid namespace shows no kernel threads)."""
    st = procfs.stat(2, proc)
    if not st or st.get("comm") != "kthreadd" or st.get("ppid") != 0:
        return set()
    kids = procfs.children(2, proc)
    return set(kids or ()) | {2}


def discover(proc: str, own_pids: List[int]) -> List[Dict[str, Any]]:
    """Find inference-server roots: matching processes whose parent does not match too."""
    matches = {}  # type: Dict[int, Tuple[str, List[str], int]]
    # A GPU node runs thousands of kernel threads: two reads each for nothing, so skip them.
    skip = kernel_threads(proc) | set(own_pids)
    candidates = [pid for pid in procfs.list_pids(proc) if pid not in skip]
    for pid in candidates:
        argv = procfs.cmdline(pid, proc)
        if not argv:
            continue
        text = " ".join(argv)
        if "py-spy" in text or "hangdoctor diagnose" in text or "hangdoctor.cli" in text:
            continue
        for kind, pat in SERVER_PATTERNS:
            if pat.search(text):
                st = procfs.stat(pid, proc)
                matches[pid] = (kind, argv, int(st["ppid"]) if st else 0)
                break
    # Plain torch.distributed jobs (a script of one's own, not a known server): the ranks carry
    # RANK / WORLD_SIZE / MASTER_ADDR in their environment; their launcher is the root.
    for pid in candidates:
        if pid in matches:
            continue
        raw = procfs.read_bytes("%s/%d/environ" % (proc, pid), 1 << 18)
        if not raw or b"WORLD_SIZE=" not in raw or b"MASTER_ADDR=" not in raw:
            continue
        argv = procfs.cmdline(pid, proc)
        if not argv or not pyspy.is_python_process(procfs.exe(pid, proc), argv, None):
            continue
        st = procfs.stat(pid, proc)
        ppid = int(st["ppid"]) if st else 0
        # the launcher: the highest Python ancestor (torchrun, mp.spawn, a launcher script)
        top, anc, hops = pid, ppid, 0
        # pid 1 too: in a container's pid namespace the server's launcher is often init
        while anc > 0 and hops < 16:
            a_argv = procfs.cmdline(anc, proc)
            if not a_argv or anc in own_pids or not pyspy.is_python_process(procfs.exe(anc, proc), a_argv, None):
                break
            top, hops = anc, hops + 1
            a_st = procfs.stat(anc, proc)
            anc = int(a_st["ppid"]) if a_st else 0
        if top not in matches:
            t_st = procfs.stat(top, proc)
            matches[top] = ("torch.distributed", procfs.cmdline(top, proc),
                            int(t_st["ppid"]) if t_st else 0)
    roots = []
    for pid, (kind, argv, ppid) in sorted(matches.items()):
        # walk up: if any ancestor matches, this is not a root
        anc, seen = ppid, 0
        covered = False
        while anc > 0 and seen < 64:  # pid 1 may be the server (a container's init)
            if anc in matches:
                covered = True
                break
            st = procfs.stat(anc, proc)
            anc = int(st["ppid"]) if st else 0
            seen += 1
        if not covered:
            # redacted as an argument list (``--api-key X``), then cut: a cut first could leave
            # half a secret that no pattern recognises
            text = redact.cut_line(" ".join(redact.redact_argv(list(argv))), 300)
            roots.append({"pid": pid, "kind": kind, "cmdline": text})
    return roots


# ---------------------------------------------------------------- per-process reading


def _env_filtered(env: Dict[str, str], prefixes: List[str]) -> Dict[str, str]:
    wanted = tuple(prefixes)  # one C-level startswith per variable
    out = {}
    for k, v in env.items():
        if k.startswith(wanted) or redact.is_secret_key(k):
            out[k] = v
    return out


def _rank_of(argv: List[str], env: Optional[Dict[str, str]], name: str) -> Tuple[Optional[int], Optional[str]]:
    if env:
        for key in ("RANK", "LOCAL_RANK", "SGLANG_TP_RANK", "TP_RANK"):
            v = env.get(key)
            if v is not None and v.strip().isdigit():
                return int(v), "env:" + key
    for i, a in enumerate(argv):
        for flag in ("--rank", "--local-rank", "--local_rank", "--node-rank", "--tp-rank"):
            if a == flag and i + 1 < len(argv) and argv[i + 1].isdigit():
                return int(argv[i + 1]), "cmdline:" + flag
            if a.startswith(flag + "=") and a.split("=", 1)[1].isdigit():
                return int(a.split("=", 1)[1]), "cmdline:" + flag
    text = name + " " + " ".join(argv[:1])
    for pat in _RANK_PATTERNS:
        m = pat.search(text)
        if m:
            return int(m.group(1)), "name"
    return None, None


# multiprocessing's resource tracker, fork server and (older Pythons) semaphore tracker
_HELPERS = re.compile(r"multiprocessing\.(resource_tracker|forkserver|semaphore_tracker) import main")


def _role_of(pid: int, root: int, argv: List[str], name: str, listen: List[Any], rank: Optional[int],
             is_torch: bool) -> str:
    text = " ".join(argv)
    base = os.path.basename(argv[0]) if argv else name
    if _COMPILER_NAMES.match(base) or _COMPILER_NAMES.match(name) or "compile_worker" in text \
            or "triton" in name.lower() and "compile" in text:
        return "compiler"
    if "EngineCore" in text or "EngineCore" in name:
        return "engine"
    if _HELPERS.search(text):
        return "helper"  # the runtime's own helper processes: never a rank
    if rank is None and _LAUNCHERS.search(text):
        # torchrun's elastic agent: it listens on the c10d store port (MASTER_PORT), which is
        # no API, and runs torch threads, but it is no worker
        return "launcher"
    if rank is not None or is_torch or "Worker" in name or "scheduler_TP" in name or \
            "--multiprocessing-fork" in argv:
        if pid != root or rank is not None:
            return "worker"
    if listen:
        return "api-server"
    if pid == root:
        return "launcher"
    return "other"


def _untraced(state_end: str, state_start: str) -> str:
    """The state at the window's end, unless our own py-spy dump held it then.

    py-spy stops the process while it reads it (state ``t``, tracing stop). Seen at the end but
    not at the start, that is the probe's own dump (the second round may still be running),
    not a debugger: the start state stands. A process already in ``t`` at the start keeps it.
    """
    if state_end == "t" and state_start != "t":
        return state_start
    return state_end


class ProcReader:
    """Reads one process at the start and at the end of the window."""

    def __init__(self, pid: int, root: int, cfg: ProbeConfig, boot_time_s: float = 0.0):
        self.pid, self.root, self.cfg = pid, root, cfg
        self.proc = cfg.proc_root
        self.boot_time_s = boot_time_s  # read once per probe, not once per process
        self.socket_inodes = []  # type: List[int]
        self.a = None  # type: Optional[Dict[str, Any]]
        self.threads_a = {}  # type: Dict[int, Dict[str, Any]]
        self.io_a = None  # type: Optional[Dict[str, int]]
        self.record = {"pid": pid, "root_pid": root}  # type: Dict[str, Any]

    def start(self) -> None:
        proc, pid = self.proc, self.pid
        self.a = procfs.stat(pid, proc)
        rec = self.record
        if self.a is None:
            rec.update({"alive": False, "status": "X", "exit_info": "gone before collection"})
            return
        argv = procfs.cmdline(pid, proc)
        fields = procfs.status_fields(pid, proc)
        name = str(self.a["comm"])
        env, env_status = procfs.environ(pid, proc)
        env_f = _env_filtered(env, self.cfg.env_prefixes) if env else {}
        # matched with the listening sockets by attach_listen(), once those are read
        self.socket_inodes = list(procfs.socket_inodes(pid, proc))
        tids = procfs.list_tids(pid, proc)
        threads = []
        for tid in tids[:512]:
            st = procfs.thread_stat(pid, tid, proc)
            if st is None:
                continue
            self.threads_a[tid] = st
            threads.append({"tid": tid, "name": st["comm"], "status": st["state"],
                            "wchan": procfs.wchan(pid, tid, proc)})
        is_torch = any(any(t["name"].startswith(p[:15]) for p in _TORCH_THREADS) for t in threads)
        rank, rank_source = _rank_of(argv, env, name)
        exe_path = procfs.exe(pid, proc)
        maps_head = None
        if not pyspy.is_python_process(exe_path, argv, None):
            maps_head = procfs.read_bytes("%s/%d/maps" % (proc, pid), 1 << 18)
        rec.update({
            "ppid": self.a["ppid"],
            "name": name,
            "exe": exe_path,
            "cmdline": argv,
            "status": self.a["state"],
            "wchan": procfs.wchan(pid, None, proc),
            "alive": self.a["state"] not in ("Z", "X"),
            "zombie": self.a["state"] == "Z",
            "create_time": round(self.boot_time_s + int(self.a["starttime"]) / procfs.CLK_TCK, 2),
            "num_threads": self.a["num_threads"],
            "threads": threads,
            "rss_bytes": procfs.kib_field(fields, "VmRSS") or int(self.a["rss_pages"]) * procfs.PAGE_SIZE,
            "vms_bytes": int(self.a["vsize"]),
            "swap_bytes": procfs.kib_field(fields, "VmSwap") or 0,
            "uid": int(fields.get("Uid", "0").split()[0]) if fields.get("Uid") else None,
            "listen": [],
            "env": env_f,
            "env_status": env_status,
            "rank": rank,
            "rank_source": rank_source,
            "is_python": pyspy.is_python_process(exe_path, argv, maps_head),
            "is_torch_distributed": is_torch,
        })
        rec["role"] = _role_of(pid, self.root, argv, name, [], rank, is_torch)
        # the pid in each pid namespace, outermost first: a container's process has two
        nspid = [int(w) for w in (fields.get("NSpid") or "").split() if w.isdigit()]
        if len(nspid) > 1:
            rec["ns_pids"] = nspid
        self.io_a = procfs.io_counters(pid, proc)
        # stdout/stderr of the root: the server log when --log was not given
        # (read through the descriptor, never by the name its link shows: see sources.LogRead)
        rec["_log_candidates"] = [sources.fd_entry(proc, pid, fd, t)
                                  for fd, t in procfs.fd_targets(pid, proc) if fd in (1, 2)
                                  and t.startswith("/") and not t.startswith("/dev/")]

    def attach_listen(self, listen_map: Dict[int, Dict[str, Any]]) -> None:
        """Name the TCP ports this process listens on (``procfs.listening_sockets``)."""
        rec = self.record
        listen = [dict(listen_map[i]) for i in self.socket_inodes if i in listen_map]
        if self.a is None or not listen:
            return
        rec["listen"] = listen
        rec["role"] = _role_of(self.pid, self.root, rec.get("cmdline") or [], str(rec.get("name")),
                               listen, rec.get("rank"), bool(rec.get("is_torch_distributed")))

    def same_process(self, st: Optional[Dict[str, Any]]) -> bool:
        """Whether ``st`` (a later /proc/PID/stat) is still the process read at the start: a
        pid is one process only while its start time is (the kernel reuses pids)."""
        return st is not None and self.a is not None and st["starttime"] == self.a["starttime"]

    def finish(self, window_s: float) -> None:
        rec, proc, pid = self.record, self.proc, self.pid
        if self.a is None:
            return
        b = procfs.stat(pid, proc)
        if b is None:
            rec.update({"alive": False, "status_end": "X", "exit_info": "exited during the window"})
            return
        if not self.same_process(b):
            # the pid now names another process: the one diagnosed is gone, and nothing read
            # from the newcomer is its
            rec.update({"alive": False, "status_end": "X", "pid_reused": True,
                        "exit_info": "exited during the window (its pid now names another "
                                     "process, started later)"})
            return
        cpu_a = (int(self.a["utime"]) + int(self.a["stime"])) / procfs.CLK_TCK
        cpu_b = (int(b["utime"]) + int(b["stime"])) / procfs.CLK_TCK
        rec["cpu_time_s"] = round(cpu_b, 3)
        rec["status_end"] = _untraced(b["state"], self.a["state"])
        rec["zombie"] = b["state"] == "Z"
        rec["alive"] = b["state"] not in ("Z", "X")
        if window_s <= 0:
            return  # one sample (--window 0): no window to measure movement over
        rec["cpu_delta_s"] = round(max(0.0, cpu_b - cpu_a), 3)
        rec["cpu_pct"] = round(100.0 * rec["cpu_delta_s"] / window_s, 1)
        for t in rec.get("threads", []):
            ta = self.threads_a.get(t["tid"])
            tb = procfs.thread_stat(pid, t["tid"], proc)
            if ta is None or tb is None:
                t["cpu_delta_s"] = None
                continue
            t["cpu_delta_s"] = round(
                (int(tb["utime"]) + int(tb["stime"]) - int(ta["utime"]) - int(ta["stime"]))
                / procfs.CLK_TCK, 3)
            t["status_end"] = _untraced(tb["state"], ta["state"])
        io_b = procfs.io_counters(pid, proc)
        if self.io_a and io_b:
            rec["read_bytes_delta"] = max(0, io_b.get("read_bytes", 0) - self.io_a.get("read_bytes", 0))
            rec["write_bytes_delta"] = max(0, io_b.get("write_bytes", 0) - self.io_a.get("write_bytes", 0))
            rec["rchar_delta"] = max(0, io_b.get("rchar", 0) - self.io_a.get("rchar", 0))
            rec["wchar_delta"] = max(0, io_b.get("wchar", 0) - self.io_a.get("wchar", 0))


# ---------------------------------------------------------------- other sources
