#!/usr/bin/env python3
"""Record what NCCL RAS and PyTorch's Flight Recorder really say, on one GPU.

    python3 tests/gpu/record_nccl.py OUTDIR

One NCCL rank (a 1-rank communicator: all a single GPU allows) in three states, each recorded:

- ``idle``: after five all_reduces, parked in Python;
- ``stuck``: a spinning kernel (torch.cuda._sleep) ahead of an all_reduce on the same stream, the
  host in synchronize: the watchdog times out (5 s) and dumps the Flight Recorder;
- the on-demand dump (``_dump_nccl_trace`` / ``_dump_nccl_trace_json``) at each state.

For each state the RAS exchange is recorded byte for byte (``CLIENT PROTOCOL 2``, ``SET FORMAT
json``, ``STATUS``; and plain ``STATUS``, ``VERBOSE STATUS``), with how the server ends its answer.
Also: the rank's /proc/PID/maps lines naming NCCL, the dist-info beside the library, and the
version strings inside it. NVLS stays off. Everything ends by itself (alarm).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "out")
os.makedirs(OUT, exist_ok=True)
ENV = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
           NVSHMEM_DISABLE_NVLS="1")


def ras_exchange(commands, timeout_s=5.0, addr=("127.0.0.1", 28028)):
    """Send each command line, collect every byte with its arrival time; return a transcript."""
    t0 = time.monotonic()
    log = []
    try:
        s = socket.create_connection(addr, timeout=timeout_s)
    except OSError as e:
        return {"error": repr(e)}
    s.settimeout(0.5)
    closed = False
    for cmd in commands:
        s.sendall((cmd + "\n").encode())
        log.append({"t": round(time.monotonic() - t0, 4), "sent": cmd})
        deadline = time.monotonic() + timeout_s
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except socket.timeout:
                if time.monotonic() - idle_since > 1.0:
                    break
                continue
            if not b:
                closed = True
                log.append({"t": round(time.monotonic() - t0, 4), "closed": True})
                break
            idle_since = time.monotonic()
            log.append({"t": round(time.monotonic() - t0, 4), "recv": b.decode("utf-8", "replace")})
        if closed:
            break
    s.close()
    return {"log": log, "closed_by_server": closed}


def rank_main():
    import datetime

    import torch
    import torch.distributed as dist

    signal.alarm(int(os.environ.get("REC_LIFETIME", "150")))
    state_dir = os.environ["REC_STATE"]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=float(os.environ.get("REC_TIMEOUT", "8"))))
    x = torch.ones(1024, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    bx = torch.ones(4096, device="cuda")
    dist.broadcast(bx, 0)
    torch.cuda.synchronize()

    def dump(tag):
        from torch._C._distributed_c10d import _dump_nccl_trace
        try:
            with open(os.path.join(state_dir, f"fr-{tag}.pickle"), "wb") as f:
                f.write(_dump_nccl_trace())
        except Exception as e:
            open(os.path.join(state_dir, f"fr-{tag}.err"), "w").write(repr(e))
        try:
            from torch._C._distributed_c10d import _dump_nccl_trace_json
            with open(os.path.join(state_dir, f"fr-{tag}.json"), "w") as f:
                f.write(_dump_nccl_trace_json(True, True))
        except Exception as e:
            open(os.path.join(state_dir, f"fr-{tag}-json.err"), "w").write(repr(e))

    dump("idle")
    open(os.path.join(state_dir, "idle"), "w").write(str(os.getpid()))
    while not os.path.exists(os.path.join(state_dir, "go-stuck")):
        time.sleep(0.1)
    # the spin: ~20 s at 2 GHz, far past the 8 s watchdog timeout
    torch.cuda._sleep(int(os.environ.get("REC_SPIN_CYCLES", "60000000000")))
    y = torch.ones(2048, device="cuda")
    dist.all_reduce(y)
    open(os.path.join(state_dir, "stuck"), "w").write(str(os.getpid()))
    torch.cuda.synchronize()
    open(os.path.join(state_dir, "returned"), "w").write("1")
    time.sleep(30)


def diagnose(pid, tag):
    """The real CLI against the rank: its snapshot and analysis are fixtures CI replays."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "hangdoctor", "diagnose", "localhost", "--pid", str(pid),
                        "--window", "2", "--json", "--save-snapshot", os.path.join(OUT, tag + ".snapshot.json"),
                        "-o", os.path.join(OUT, tag + ".html")],
                       capture_output=True, text=True, timeout=90, cwd=root)
    open(os.path.join(OUT, tag + ".diagnose.json"), "w").write(r.stdout)
    open(os.path.join(OUT, tag + ".diagnose.err"), "w").write(r.stderr[-20000:])


def main():
    if os.environ.get("REC_RANK"):
        rank_main()
        return
    summary = {}
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.nccl.version())"],
                       capture_output=True, text=True, timeout=120)
    summary["torch_nccl"] = r.stdout.strip() + r.stderr[-500:]
    state = os.path.join(OUT, "state")
    os.makedirs(state, exist_ok=True)
    home = os.path.join(OUT, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(ENV, REC_RANK="1", REC_STATE=state, MASTER_ADDR="127.0.0.1", MASTER_PORT="29533",
               TORCH_NCCL_TRACE_BUFFER_SIZE="2000", TORCH_FR_BUFFER_SIZE="2000",
               TORCH_NCCL_DUMP_ON_TIMEOUT="1",
               TORCH_NCCL_DEBUG_INFO_TEMP_FILE=os.path.join(OUT, "frdump", "nccl_trace_rank_"),
               TORCH_NCCL_DEBUG_INFO_PIPE_FILE=os.path.join(OUT, "frpipe", "nccl_pipe_rank_"),
               NCCL_DEBUG="INFO", HOME=home)
    if os.environ.get("REC_TIMING"):
        env["TORCH_NCCL_ENABLE_TIMING"] = "1"
    os.makedirs(os.path.join(OUT, "frdump"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "frpipe"), exist_ok=True)
    log = open(os.path.join(OUT, "rank.log"), "w")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.time()
    while not os.path.exists(os.path.join(state, "idle")) and time.time() - t0 < 150 and p.poll() is None:
        time.sleep(0.2)
    summary["ready_s"] = round(time.time() - t0, 1)
    pid = p.pid
    maps = open(f"/proc/{pid}/maps").read().splitlines()
    nccl_maps = sorted({ln.split()[-1] for ln in maps if "nccl" in ln.lower()})
    summary["nccl_maps"] = nccl_maps
    dist_infos = []
    for lib in nccl_maps:
        d = os.path.dirname(lib)
        for up in (d, os.path.dirname(d), os.path.dirname(os.path.dirname(d)),
                   os.path.dirname(os.path.dirname(os.path.dirname(d)))):
            dist_infos += glob.glob(os.path.join(up, "*nccl*.dist-info"))
    summary["nccl_dist_info"] = sorted(set(dist_infos))
    vers = []
    for lib in nccl_maps:
        try:
            r = subprocess.run(["sh", "-c", f"strings -n 6 '{lib}' | grep -iE 'nccl.{{0,20}}version|version.{{0,8}}[0-9]+\\.[0-9]+\\.[0-9]+' | head -20"],
                               capture_output=True, text=True, timeout=30)
            vers.append(r.stdout)
        except Exception as e:
            vers.append(repr(e))
    summary["nccl_strings"] = vers
    summary["status_file"] = open(f"/proc/{pid}/status").read()
    summary["environ_keys"] = sorted(k.decode(errors="replace").split("=")[0] for k in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if k)
    ras = {}
    ras["idle_json"] = ras_exchange(["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"])
    ras["idle_text"] = ras_exchange(["CLIENT PROTOCOL 2", "STATUS"])
    ras["idle_verbose"] = ras_exchange(["CLIENT PROTOCOL 2", "VERBOSE STATUS"])
    ras["idle_json_verbose"] = ras_exchange(["CLIENT PROTOCOL 2", "SET FORMAT json", "VERBOSE STATUS"])
    ras["bad_protocol"] = ras_exchange(["CLIENT PROTOCOL 99"])
    if os.environ.get("REC_DIAG"):
        diagnose(pid, "idle")
    # py-spy view if present
    open(os.path.join(state, "go-stuck"), "w").write("1")
    t1 = time.time()
    while not os.path.exists(os.path.join(state, "stuck")) and time.time() - t1 < 20:
        time.sleep(0.1)
    time.sleep(1.0)
    ras["stuck_json_1"] = ras_exchange(["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"])
    time.sleep(2.0)
    ras["stuck_json_2"] = ras_exchange(["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"])
    ras["stuck_text"] = ras_exchange(["CLIENT PROTOCOL 2", "STATUS"])
    # on-demand FR through the pipe (opt-in feature; here the job set it up)
    pipes = glob.glob(os.path.join(OUT, "frpipe", "*"))
    summary["fr_pipes"] = pipes
    for pp in pipes:
        try:
            fd = os.open(pp, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"1\n")
            os.close(fd)
        except OSError as e:
            summary["fr_pipe_err"] = repr(e)
    # wait for the watchdog timeout dump
    t2 = time.time()
    while time.time() - t2 < 40 and p.poll() is None:
        if glob.glob(os.path.join(OUT, "frdump", "*")):
            time.sleep(1.0)
            break
        time.sleep(0.5)
    if os.environ.get("REC_DIAG") and p.poll() is None:
        diagnose(pid, "stuck")
    ras["after_timeout_json"] = ras_exchange(["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"])
    summary["fr_dumps"] = {f: os.path.getsize(f) for f in glob.glob(os.path.join(OUT, "frdump", "*"))}
    summary["home_files"] = [os.path.join(dp, f) for dp, _, fs in os.walk(home) for f in fs]
    summary["tmp_nccl"] = glob.glob("/tmp/*nccl*") + glob.glob("/tmp/*trace*")
    summary["rank_exit"] = p.poll()
    summary["state_files"] = sorted(os.listdir(state))
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    json.dump(ras, open(os.path.join(OUT, "ras.json"), "w"), indent=1)
    json.dump(summary, open(os.path.join(OUT, "summary.json"), "w"), indent=1)
    print(json.dumps(summary, indent=1)[:6000])


if __name__ == "__main__":
    main()
