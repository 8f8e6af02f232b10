"""``k8s:``, ``--hosts k8s:SELECTOR`` and ``--hosts slurm:JOBID`` against recorded cluster
output, with the exec path run for real.

There is no Kubernetes or Slurm here. Fake ``kubectl``, ``scontrol`` and ``srun`` on PATH
replay recorded output (tests/fixtures/containers/) for the questions (get pod, get pods -l,
show job, show hostnames), log the argv they were given, and for the exec itself
(``kubectl exec -i POD -- sh -c …``, ``srun … sh -c …``) run ``docker exec -i CONTAINER``
with the command they were handed: the probe then really runs in a real container, through
the same exec pipe as ``docker:``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CLI_TIMEOUT_S
from docker_tools import docker_engine_fixture, in_container_fixture  # noqa: F401
from test_container_docker import check_of, manifest, top

pytestmark = pytest.mark.slow

RECORDED = Path(__file__).parent / "fixtures" / "containers"

FAKE_KUBECTL = r'''#!PYTHON
"""kubectl, replaying recorded answers; exec and logs go to docker (HD_FAKE_PODS)."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["HD_FAKE_LOG"], "a") as f:
    f.write(json.dumps(["kubectl"] + args) + "\n")
while args and args[0] in ("--kubeconfig", "--context"):
    args = args[2:]
pods = json.loads(os.environ.get("HD_FAKE_PODS", "{}"))
rec = os.environ["HD_FAKE_RECORDED"]
def ns_and_rest(a):
    ns = "default"
    rest = []
    i = 0
    while i < len(a):
        if a[i] == "-n":
            ns = a[i + 1]
            i += 2
            continue
        rest.append(a[i])
        i += 1
    return ns, rest
verb = args[0]
if verb == "get":
    ns, rest = ns_and_rest(args[1:])
    if rest[0] == "pods":
        sel = rest[rest.index("-l") + 1]
        path = os.path.join(rec, "pods-%s.json" % sel.replace("=", "-"))
    else:
        path = os.path.join(rec, "pod-%s.json" % rest[1])
    if not os.path.exists(path):
        sys.stderr.write('Error from server (NotFound): pods "%s" not found\n' % rest[-3])
        sys.exit(1)
    sys.stdout.write(open(path).read())
    sys.exit(0)
if verb in ("exec", "logs"):
    ns, rest = ns_and_rest(args[1:])
    cmd = rest[rest.index("--") + 1:] if "--" in rest else []
    head = rest[: rest.index("--")] if "--" in rest else rest
    pod = [a for i, a in enumerate(head) if not a.startswith("-") and (i == 0 or head[i - 1] != "-c")][0]
    if pod not in pods:
        sys.stderr.write('Error from server (NotFound): pods "%s" not found\n' % pod)
        sys.exit(1)
    if verb == "exec":
        os.execvp("docker", ["docker", "exec", "-i", pods[pod]] + cmd)
    os.execvp("docker", ["docker", "logs", "--timestamps", "--tail", "400", pods[pod]])
sys.stderr.write("fake kubectl: unexpected %r\n" % args)
sys.exit(2)
'''

FAKE_SCONTROL = r'''#!PYTHON
"""scontrol, replaying recorded answers."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["HD_FAKE_LOG"], "a") as f:
    f.write(json.dumps(["scontrol"] + args) + "\n")
rec = os.environ["HD_FAKE_RECORDED"]
if args[:2] == ["show", "job"]:
    jobid = args[-1]
    for name in os.listdir(rec):
        if name.startswith("scontrol-show-job-%s" % jobid):
            sys.stdout.write(open(os.path.join(rec, name)).read())
            sys.exit(0)
    sys.stderr.write("slurm_load_jobs error: Invalid job id specified\n")
    sys.exit(1)
if args[:2] == ["show", "hostnames"]:
    # what scontrol prints for the recorded job's list
    expanded = {"gpu-node-[01-02]": ["gpu-node-01", "gpu-node-02"]}
    sys.stdout.write("".join(h + "\n" for h in expanded[args[2]]))
    sys.exit(0)
sys.exit(2)
'''

FAKE_SRUN = r'''#!PYTHON
"""srun: the job step on node -w runs in that node's container (HD_FAKE_NODES)."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["HD_FAKE_LOG"], "a") as f:
    f.write(json.dumps(["srun"] + args) + "\n")
nodes = json.loads(os.environ["HD_FAKE_NODES"])
node = args[args.index("-w") + 1]
cmd = args[args.index("sh"):]
os.execvp("docker", ["docker", "exec", "-i", nodes[node]] + cmd)
'''


def install_fakes(bin_dir: Path) -> None:
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("kubectl", FAKE_KUBECTL), ("scontrol", FAKE_SCONTROL),
                       ("srun", FAKE_SRUN)):
        path = bin_dir / name
        path.write_text(text.replace("#!PYTHON", "#!" + sys.executable, 1))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def fake_env(engine_env: dict[str, str], tmp: Path, **maps: Any) -> dict[str, str]:
    bin_dir = tmp / "fakebin"
    install_fakes(bin_dir)
    env = dict(engine_env)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    env["HD_FAKE_LOG"] = str(tmp / "fake-argv.jsonl")
    env["HD_FAKE_RECORDED"] = str(RECORDED)
    env["HD_FAKE_PODS"] = json.dumps(maps.get("pods", {}))
    env["HD_FAKE_NODES"] = json.dumps(maps.get("nodes", {}))
    return env


def calls(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["HD_FAKE_LOG"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def diagnose(env: dict[str, str], tmp: Path, *args: str):
    snap_path = tmp / f"snap-{time.monotonic_ns()}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "diagnose", *args, "--json",
         "--save-snapshot", str(snap_path)],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env)
    analysis = json.loads(proc.stdout) if proc.stdout.strip() else {}
    snap: Any = json.loads(snap_path.read_text()) if snap_path.exists() else {}
    return proc, analysis, snap


# ------------------------------------------------------------------ k8s:NS/POD[/CONTAINER]


def test_k8s_pod_runs_the_probe_through_kubectl_exec(in_container, docker_engine, tmp_path) -> None:
    ctr = in_container("postload", workers=2)
    env = fake_env(docker_engine.env, tmp_path, pods={"vllm-0": ctr.name})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    proc, a, snap = diagnose(env, tmp_path, "k8s:llm/vllm-0/vllm", "--context", "prod-east",
                             "--kubeconfig", str(kubeconfig), "--window", "1")
    assert proc.returncode == 3, proc.stderr
    assert top(a) == "post-load-deadlock"
    seen = calls(env)
    execs = [c for c in seen if "exec" in c]
    assert execs and execs[0][:10] == ["kubectl", "--kubeconfig", str(kubeconfig), "--context",
                                        "prod-east", "exec", "-i", "-n", "llm", "vllm-0"]
    assert execs[0][10:14] == ["-c", "vllm", "--", "sh"]
    gets = [c for c in seen if "get" in c]
    assert gets and gets[0][5:] == ["get", "pod", "-n", "llm", "vllm-0", "-o", "json"]
    assert any("logs" in c and "--timestamps" in c for c in seen)
    # the pod's recorded facts: node, image, the OOM-killed restart, /dev/shm emptyDir
    c = snap["containers"][0]
    assert c["pod"] == "vllm-0" and c["namespace"] == "llm" and c["node"] == "gpu-node-07"
    assert c["image"] == "vllm/vllm-openai:v0.11.0" and c["shm_size_bytes"] == 16 << 30
    assert c["last_exit_reason"] == "OOMKilled" and c["restart_count"] == 1
    assert c["memory_limit_bytes"] == 512 << 30 and c["gpu_limits"] == {"nvidia.com/gpu": "8"}
    oom = check_of(a, "container.oom")
    assert oom["verdict"] == "fired" and "after an OOM kill" in oom["summary"]
    assert "pod llm/vllm-0 container vllm" in check_of(a, "container.placement")["summary"]
    assert manifest(snap)["kubernetes"]["status"] == "ok"


def test_k8s_unknown_pod_and_missing_kubectl(docker_engine, tmp_path) -> None:
    env = fake_env(docker_engine.env, tmp_path, pods={})
    proc, _, _ = diagnose(env, tmp_path, "k8s:llm/nope", "--window", "0")
    assert proc.returncode == 4
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("hangdoctor: k8s:llm/nope")]
    assert line and 'pods "nope" not found' in line[0] and "kubectl get pods -A" in line[0]
    env["PATH"] = str(tmp_path / "empty")
    proc, _, _ = diagnose(env, tmp_path, "k8s:llm/vllm-0", "--window", "0")
    assert proc.returncode == 4
    assert "kubectl: command not found" in proc.stderr and "Traceback" not in proc.stderr


def test_hosts_k8s_selector_expands_to_the_running_pods(in_container, docker_engine, tmp_path) -> None:
    c0 = in_container("postload", workers=2)
    c1 = in_container("postload", workers=2)
    env = fake_env(docker_engine.env, tmp_path, pods={"vllm-0": c0.name, "vllm-1": c1.name})
    proc, a, snap = diagnose(env, tmp_path, "--hosts", "k8s:llm/app=vllm", "--window", "1")
    assert proc.returncode == 3, proc.stderr
    listing = [c for c in calls(env) if "pods" in c and "-l" in c]
    assert listing == [["kubectl", "get", "pods", "-n", "llm", "-l", "app=vllm", "-o", "json"]]
    # vllm-2 is Pending (recorded): not a target
    assert {h["name"] for h in a["hosts"]} == {"k8s:llm/vllm-0", "k8s:llm/vllm-1"}
    assert len(snap["hosts"]) == 2
    assert top(a) == "post-load-deadlock"


def test_hosts_k8s_selector_matching_nothing(docker_engine, tmp_path) -> None:
    env = fake_env(docker_engine.env, tmp_path)
    proc, _, _ = diagnose(env, tmp_path, "--hosts", "k8s:app=nothing", "--window", "0")
    assert proc.returncode == 4
    assert "k8s:app=nothing" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ --hosts slurm:JOBID


def test_hosts_slurm_job_reaches_each_node_with_srun_overlap(in_container, docker_engine, tmp_path) -> None:
    n1 = in_container("postload", workers=2)
    n2 = in_container("postload", workers=2, die_rank=0)
    env = fake_env(docker_engine.env, tmp_path,
                   nodes={"gpu-node-01": n1.name, "gpu-node-02": n2.name})
    proc, a, snap = diagnose(env, tmp_path, "--hosts", "slurm:4242", "--window", "1")
    assert proc.returncode == 3, proc.stderr
    seen = calls(env)
    assert ["scontrol", "show", "job", "-o", "4242"] in seen
    assert ["scontrol", "show", "hostnames", "gpu-node-[01-02]"] in seen
    sruns = sorted(c[:10] for c in seen if c[0] == "srun")
    assert sruns == [
        ["srun", "--overlap", "--jobid", "4242", "-w", node, "-N1", "-n1", "--quiet", "sh"]
        for node in ("gpu-node-01", "gpu-node-02")
    ]
    assert {h["name"] for h in a["hosts"]} == {"gpu-node-01", "gpu-node-02"}
    assert {s["host"]["name"] for s in snap["hosts"]} == {"gpu-node-01", "gpu-node-02"}
    assert any(c["id"] == "rank-died" for c in a["causes"])


def test_hosts_slurm_pending_and_unknown_jobs(docker_engine, tmp_path) -> None:
    env = fake_env(docker_engine.env, tmp_path)
    proc, _, _ = diagnose(env, tmp_path, "--hosts", "slurm:4243", "--window", "0")
    assert proc.returncode == 4 and "the job is PENDING, not running" in proc.stderr
    proc, _, _ = diagnose(env, tmp_path, "--hosts", "slurm:999", "--window", "0")
    assert proc.returncode == 4 and "no such job" in proc.stderr and "squeue" in proc.stderr
    proc, _, _ = diagnose(env, tmp_path, "--hosts", "slurm:abc", "--window", "0")
    assert proc.returncode == 2 and "not a Slurm job id" in proc.stderr
    env["PATH"] = str(tmp_path / "empty")
    proc, _, _ = diagnose(env, tmp_path, "--hosts", "slurm:4242", "--window", "0")
    assert proc.returncode == 4 and "scontrol: command not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_slurm_plus_ssh_reaches_the_nodes_over_ssh(docker_engine, tmp_path) -> None:
    """``slurm+ssh:JOBID``: the same node list, SSH targets (not connected here)."""
    env = fake_env(docker_engine.env, tmp_path)
    code = (
        "from hangdoctor.reach import launchers\n"
        "ts = launchers.expand('slurm+ssh:4242')\n"
        "print([type(t).__name__ for t in ts], [t.name for t in ts])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.stdout.strip() == "['SshTarget', 'SshTarget'] ['gpu-node-01', 'gpu-node-02']", out.stderr
    assert os.path.exists(env["HD_FAKE_LOG"])


def test_k8s_refused_ptrace_gives_the_pod_fix(in_container, docker_engine, tmp_path) -> None:
    ctr = in_container("postload", workers=1, as_uid=1000)
    env = fake_env(docker_engine.env, tmp_path, pods={"vllm-0": ctr.name})
    proc, a, snap = diagnose(env, tmp_path, "k8s:llm/vllm-0", "--window", "0")
    stacks = manifest(snap)["stacks"]
    assert stacks["status"] == "denied", proc.stderr
    assert "no CAP_SYS_PTRACE" in stacks["detail"]
    fix = stacks["remedy"]
    assert "securityContext.capabilities.add: [SYS_PTRACE]" in fix
    assert "kubectl debug -it vllm-0 -n llm --profile=general --target=vllm" in fix
    assert snap["processes"], "a partial report: the processes from /proc"
