"""Container facts, target parsing and launcher expansion on recorded input (no engine needed).

Recorded: Docker's state files, ``docker inspect`` and a json-file log of a real container
(tests/fixtures/containers/, from this machine's dockerd), /proc/PID/cgroup lines of Docker
(cgroup v1 and v2), containerd under Kubernetes, CRI-O and Podman, and ``kubectl get pod``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from hangdoctor.collect import cgroups, container, container_runtime, ptrace_denial
from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError, UsageError
from hangdoctor.reach import parse_target
from hangdoctor.reach.docker import DockerTarget, docker_error, inspect_facts, log_from_lines
from hangdoctor.reach.exec_pipe import ExecPipeTarget, parse_snapshot, shell_script
from hangdoctor.reach.k8s import K8sTarget, kubectl_error, parse_k8s_spec, pod_facts
from hangdoctor.reach.launchers import is_launcher_spec, split_selector
from hangdoctor.reach.runtime_facts import merge_runtime_facts
from hangdoctor.reach.via import ViaTarget

RECORDED = Path(__file__).parent / "fixtures" / "containers"
DOCKER_ID = "c792b9ff901090391310bae9dd85ac0e9cb95b66cff5096f65ea9046d98ca4cc"
K_ID = "9a1c5e3f7b2d4c6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d3e"

CGROUP_LINES = {
    "docker-v1": ((RECORDED / "proc-cgroup-docker-v1.txt").read_text(), "docker", DOCKER_ID),
    "docker-v2-systemd": (f"0::/system.slice/docker-{DOCKER_ID}.scope\n", "docker", DOCKER_ID),
    "k8s-containerd-v2": (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1_11d2_"
        f"883f_0016d3cca427.slice/cri-containerd-{K_ID}.scope\n", "kubernetes", K_ID),
    "k8s-cgroupfs-v1": (
        f"4:memory:/kubepods/burstable/pod1b4e28ba-2fa1-11d2-883f-0016d3cca427/{K_ID}\n",
        "kubernetes", K_ID),
    "k8s-crio": (f"0::/kubepods.slice/kubepods-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/"
                 f"crio-{K_ID}.scope\n", "kubernetes", K_ID),
    "podman": (f"0::/machine.slice/libpod-{K_ID}.scope/container\n", "podman", K_ID),
}


@pytest.mark.parametrize("case", sorted(CGROUP_LINES))
def test_identify_the_container_from_cgroup_paths(case: str) -> None:
    text, runtime, cid = CGROUP_LINES[case]
    found = cgroups.identify(cgroups.parse_cgroup(text))
    assert found is not None and found["runtime"] == runtime and found["id"] == cid
    if runtime == "kubernetes":
        assert found["pod_uid"] == "1b4e28ba-2fa1-11d2-883f-0016d3cca427"


@pytest.mark.parametrize("text", [
    "0::/\n",
    "4:memory:/process_api/d01ec6712534a41eaebccddbebc5151d\n0::/\n",  # this machine's own
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/slurm/uid_1001/job_4242/step_0/task_0\n",
])
def test_a_process_outside_containers_is_not_one(text: str) -> None:
    assert cgroups.identify(cgroups.parse_cgroup(text)) is None


def test_ns_pids_outermost_first() -> None:
    assert container.ns_pids({"NSpid": "20928\t1"}) == [20928, 1]
    assert container.ns_pids({"NSpid": "77"}) == [77]
    assert container.ns_pids({}) == []


def _docker_root(tmp_path: Path) -> Path:
    d = tmp_path / "docker" / "containers" / DOCKER_ID
    d.mkdir(parents=True)
    shutil.copy(RECORDED / "docker-config.v2.json", d / "config.v2.json")
    shutil.copy(RECORDED / "docker-hostconfig.json", d / "hostconfig.json")
    return tmp_path / "docker"


def test_docker_state_files_name_the_container(tmp_path: Path) -> None:
    root = _docker_root(tmp_path)
    assert container_runtime.docker_state(DOCKER_ID, [str(tmp_path / "nothing")]) is None
    st = container_runtime.docker_state(DOCKER_ID, [str(tmp_path / "nothing"), str(root)])
    assert st is not None
    assert st["name"] == "hd-record-1" and st["image"] == "hangdoctor-test-base:1"
    assert st["shm_size_bytes"] == 256 << 20 and st["ipc_mode"] == "private"
    assert st["cap_add"] == ["CAP_SYS_PTRACE"] and st["memory_limit_bytes"] == 1 << 30
    assert st["log_driver"] == "json-file" and st["log_path"].endswith("-json.log")
    assert st["init_host_pid"] == 17400


def test_docker_inspect_gives_the_same_facts_as_the_state_files(tmp_path: Path) -> None:
    doc = json.loads((RECORDED / "docker-inspect.json").read_text())
    facts = inspect_facts(doc)
    st = container_runtime.docker_state(DOCKER_ID, [str(_docker_root(tmp_path))])
    assert st is not None
    for key in ("name", "image", "shm_size_bytes", "ipc_mode", "cap_add", "memory_limit_bytes",
                "log_path", "log_driver", "init_host_pid"):
        assert facts[key] == st[key], key
    assert facts["id"] == DOCKER_ID and facts["short_id"] == DOCKER_ID[:12]


def test_dockerd_data_root_is_found_from_its_command_line(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("dockerd\n")
    (proc / "4242" / "cmdline").write_bytes(b"dockerd\0--data-root\0/raid/docker\0-H\0fd://\0")
    (proc / "4242" / "status").write_text("Name:\tdockerd\nUid:\t0\t0\t0\t0\n")  # root's
    # a "dockerd" any user started: its --data-root is not believed
    (proc / "4244").mkdir()
    (proc / "4244" / "comm").write_text("dockerd\n")
    (proc / "4244" / "cmdline").write_bytes(b"dockerd\0--data-root\0/home/u/planted\0")
    (proc / "4244" / "status").write_text("Name:\tdockerd\nUid:\t1000\t1000\t1000\t1000\n")
    (proc / "4243").mkdir()
    (proc / "4243" / "comm").write_text("containerd\n")
    (proc / "4243" / "cmdline").write_bytes(b"containerd\0--root\0/elsewhere\0")
    roots = container_runtime.docker_roots(str(proc))
    assert roots[0] == "/var/lib/docker" and "/raid/docker" in roots and "/elsewhere" not in roots
    assert "/home/u/planted" not in roots


def test_docker_json_log_is_decoded_and_split_lines_joined() -> None:
    lines = (RECORDED / "docker-json.log").read_text().splitlines()
    out = container_runtime.decode_log_lines(lines, "docker-json")
    assert out[0].startswith("WARNING shm broadcast: No available shared memory")
    assert out[1].startswith("INFO 12-01 09:00:00 [gpu_model_runner.py:1892]")
    assert out[2] == "x" * 20000  # Docker split it at 16 KiB
    assert len(out) == 3
    # a tail cut in the middle of a JSON object loses only that line
    assert container_runtime.decode_log_lines(['"stream":"stdout"}'] + lines[:1], "docker-json") == out[:1]


def test_cri_log_is_decoded() -> None:
    lines = [
        "2026-12-01T08:00:00.000000001Z stdout F INFO starting vLLM API server",
        "2026-12-01T08:00:01.000000001Z stderr P part one, ",
        "2026-12-01T08:00:01.000000002Z stderr F part two",
    ]
    assert container_runtime.decode_log_lines(lines, "cri") == ["INFO starting vLLM API server",
                                                               "part one, part two"]


def test_pod_log_path_takes_the_latest_restart(tmp_path: Path) -> None:
    d = tmp_path / "llm_vllm-0_1b4e28ba-2fa1-11d2-883f-0016d3cca427" / "vllm"
    d.mkdir(parents=True)
    for n in ("0.log", "1.log", "10.log", "1.log.20261201-000000.gz"):
        (d / n).write_text("x")
    assert container_runtime.pod_log_path("llm", "vllm-0", "vllm", str(tmp_path)) == str(d / "10.log")
    assert container_runtime.pod_log_path("llm", "vllm-1", "vllm", str(tmp_path)) is None


def test_containerd_state_names_the_pod(tmp_path: Path) -> None:
    d = tmp_path / K_ID
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"ociVersion": "1.1.0", "annotations": {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": "vllm",
        "io.kubernetes.cri.sandbox-name": "vllm-0",
        "io.kubernetes.cri.sandbox-namespace": "llm",
        "io.kubernetes.cri.image-name": "docker.io/vllm/vllm-openai:v0.11.0"}}))
    st = container_runtime.containerd_state(K_ID, str(tmp_path))
    assert st == {"name": "vllm", "pod": "vllm-0", "namespace": "llm",
                  "image": "docker.io/vllm/vllm-openai:v0.11.0", "state_file": str(d / "config.json")}


# ------------------------------------------------------------------ cgroup counters


def _cgroup_v1(root: Path, path: str, **files: str) -> None:
    d = root / "memory" / path.lstrip("/")
    d.mkdir(parents=True)
    (root / "cpu" / path.lstrip("/")).mkdir(parents=True)
    defaults = {"memory.limit_in_bytes": "1073741824", "memory.usage_in_bytes": "1072693248",
                "memory.max_usage_in_bytes": "1073741824", "memory.failcnt": "5012",
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"}
    defaults.update({k.replace("_", ".", 1): v for k, v in files.items()})
    for name, text in defaults.items():
        (d / name).write_text(text)
    c = root / "cpu" / path.lstrip("/")
    (c / "cpu.cfs_quota_us").write_text("400000\n")
    (c / "cpu.cfs_period_us").write_text("100000\n")
    (c / "cpu.stat").write_text("nr_periods 100\nnr_throttled 7\nthrottled_time 1500000000\n")


def test_cgroup_v1_counters(tmp_path: Path) -> None:
    path = f"/docker/{DOCKER_ID}"
    _cgroup_v1(tmp_path, path)
    cg = {"memory": path, "cpu": path, "cpuacct": path}
    out = cgroups.cgroup_counters(cg, {"memory": "/"}, str(tmp_path))
    assert out["cgroup_version"] == 1 and out["memory_limit_bytes"] == 1 << 30
    assert out["oom_kill"] == 2 and out["under_oom"] == 0 and out["memory_failcnt"] == 5012
    assert out["cpu_quota_cores"] == 4.0 and out["cpu_nr_throttled"] == 7
    assert out["cpu_throttled_s"] == 1.5


def test_cgroup_v1_no_limit_is_none(tmp_path: Path) -> None:
    path = "/docker/x"
    _cgroup_v1(tmp_path, path, memory_limit_in_bytes="9223372036854771712")
    out = cgroups.cgroup_counters({"memory": path}, {}, str(tmp_path))
    assert "memory_limit_bytes" not in out


def test_inside_the_container_its_cgroup_is_the_root(tmp_path: Path) -> None:
    """In a container the kernel names /docker/ID, but the container's own hierarchy is
    mounted at the root: it is used only when the probe is in that same cgroup."""
    _cgroup_v1(tmp_path, "/")
    path = f"/docker/{DOCKER_ID}"
    inside = cgroups.cgroup_counters({"memory": path}, {"memory": path}, str(tmp_path))
    assert inside["oom_kill"] == 2
    outside = cgroups.cgroup_counters({"memory": path}, {"memory": "/"}, str(tmp_path))
    assert "oom_kill" not in outside  # never the host's numbers as the container's


def test_cgroup_v2_counters(tmp_path: Path) -> None:
    d = tmp_path / "system.slice" / f"docker-{DOCKER_ID}.scope"
    d.mkdir(parents=True)
    (d / "memory.current").write_text("524288000\n")
    (d / "memory.max").write_text("max\n")
    (d / "memory.peak").write_text("600000000\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 1\n")
    (d / "cpu.max").write_text("200000 100000\n")
    (d / "cpu.stat").write_text("usage_usec 1\nnr_throttled 4\nthrottled_usec 250000\n")
    (d / "pids.current").write_text("40\n")
    (d / "pids.max").write_text("max\n")
    out = cgroups.cgroup_counters({"": f"/system.slice/docker-{DOCKER_ID}.scope"}, {"": "/"},
                                  str(tmp_path))
    assert out["cgroup_version"] == 2 and "memory_limit_bytes" not in out
    assert out["oom_kill"] == 1 and out["oom_events"] == 3 and out["memory_max_events"] == 12
    assert out["cpu_quota_cores"] == 2.0 and out["cpu_throttled_s"] == 0.25
    assert out["pids_current"] == 40 and "pids_max" not in out


# ------------------------------------------------------------------ ptrace refusals


@pytest.mark.parametrize("uid,host,reason", [
    (1000, {"euid": 0, "has_cap_sys_ptrace": False, "in_container": "docker"}, "no-cap-other-uid"),
    (1000, {"euid": 1001, "has_cap_sys_ptrace": False}, "other-uid"),
    (0, {"euid": 0, "has_cap_sys_ptrace": True, "ptrace_scope": 3}, "yama-3"),
    (1000, {"euid": 1000, "has_cap_sys_ptrace": False, "ptrace_scope": 1}, "yama-scope"),
    (0, {"euid": 0, "has_cap_sys_ptrace": True, "seccomp": 2}, "seccomp"),
    (0, {"euid": 0, "has_cap_sys_ptrace": True, "seccomp": 0}, "unknown"),
])
def test_ptrace_reason(uid, host, reason) -> None:
    assert ptrace_denial.ptrace_reason(uid, host) == reason


def test_ptrace_fix_per_runtime() -> None:
    names = {"container": "vllm", "pod": "vllm-0", "namespace": "llm", "host_pid": 4242}
    docker = ptrace_denial.ptrace_fix("no-cap-other-uid", "docker", names)
    assert "docker run --cap-add SYS_PTRACE" in docker and "--pid 4242" in docker
    k8s = ptrace_denial.ptrace_fix("no-cap-other-uid", "kubernetes", names)
    assert "securityContext.capabilities.add: [SYS_PTRACE]" in k8s
    assert "kubectl debug -it vllm-0 -n llm --profile=general --target=vllm" in k8s
    assert "podman run --cap-add SYS_PTRACE" in ptrace_denial.ptrace_fix("yama-scope", "podman", names)
    assert "seccomp=unconfined" in ptrace_denial.ptrace_fix("seccomp", "docker", names)
    assert "seccompProfile" in ptrace_denial.ptrace_fix("seccomp", "kubernetes", names)
    host = ptrace_denial.ptrace_fix("other-uid", None, {})
    assert "sudo" in host and "--sudo" in host
    assert "ptrace_scope=0" in ptrace_denial.ptrace_fix("yama-scope", None, {})
    reason, why, _ = ptrace_denial.explain_denial(1000, {"euid": 0, "has_cap_sys_ptrace": False,
                                                         "in_container": "docker"}, names)
    assert reason == "no-cap-other-uid" and "uid 1000" in why and "CAP_SYS_PTRACE" in why


def test_namespaced_thread_ids_are_mapped_back(tmp_path: Path) -> None:
    proc = tmp_path
    for tid, ns in ((500, 1), (501, 9)):
        d = proc / "500" / "task" / str(tid)
        d.mkdir(parents=True)
        (d / "status").write_text(f"Name:\tpython3\nNSpid:\t{tid}\t{ns}\n")
    rec = {"pid": 500, "ns_pids": [500, 1], "threads": [
        {"tid": 500, "status": "S", "status_end": "S"}, {"tid": 501, "status": "R", "status_end": "S"}]}
    stacks = {"500": {"status": "ok", "samples": [
        {"t": 0.0, "threads": [{"os_thread_id": 1, "active": True}, {"os_thread_id": 9, "active": True}]},
        {"t": 2.0, "threads": [{"os_thread_id": 1, "active": True}, {"os_thread_id": 9, "active": True}]}]}}
    assert container.map_namespaced_threads(stacks, [rec], str(proc)) == 4
    first, second = stacks["500"]["samples"]
    assert [(t["os_thread_id"], t["ns_thread_id"], t["active"]) for t in first["threads"]] == [
        (500, 1, False), (501, 9, True)]
    assert [t["active"] for t in second["threads"]] == [False, False]
    # a process in the probe's own namespace is left alone
    plain = {"500": {"status": "ok", "samples": [{"threads": [{"os_thread_id": 500, "active": True}]}]}}
    assert container.map_namespaced_threads(plain, [{"pid": 500, "threads": []}], str(proc)) == 0


def test_servers_shm_is_the_containers_when_all_roots_live_there() -> None:
    c = {"pids": [10, 11], "root_pid": 10, "name": "vllm", "probe_inside": False,
         "shm": {"total_bytes": 64 << 20, "free_bytes": 1 << 20, "used_bytes": 63 << 20}}
    shm = container.servers_shm([c], [10])
    assert shm == {"total_bytes": 64 << 20, "free_bytes": 1 << 20, "used_bytes": 63 << 20,
                   "path": "/proc/10/root/dev/shm", "container": "vllm"}
    assert container.servers_shm([c], [10, 99]) is None  # a root on the host too
    assert container.servers_shm([dict(c, probe_inside=True)], [10]) is None


def test_a_private_cgroup_namespace_is_the_probes_own_container(tmp_path: Path) -> None:
    """cgroup v2 with a private namespace: /proc/*/cgroup read "0::/" in the container, naming
    none; the probe then takes its own cgroup, /dev/shm and /dev as the servers' container's."""
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    for pid in ("self", "7", "8"):
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cgroup").write_text("0::/\n")
    cg.mkdir()
    (cg / "memory.current").write_text("1048576\n")
    (cg / "memory.max").write_text("2147483648\n")
    (cg / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
    recs = [{"pid": 7}, {"pid": 8}]
    inside = container.Containers(recs, str(proc), str(cg), host={"in_container": "docker"})
    found = inside.finish()
    assert len(found) == 1 and found[0]["probe_inside"] and found[0]["pids"] == [7, 8]
    assert found[0]["cgroup"]["memory_limit_bytes"] == 2 << 30 and found[0]["cgroup"]["oom_kill"] == 1
    assert "total_bytes" in found[0]["shm"]  # the probe's own /dev/shm
    # on a host (or a container whose cgroup paths name something) nothing is made up
    assert container.Containers(recs, str(proc), str(cg), host={"in_container": None}).finish() == []
    (proc / "self" / "cgroup").write_text("4:memory:/process_api/d01ec6712534a41e\n0::/\n")
    assert container.Containers(recs, str(proc), str(cg), host={"in_container": "docker"}).finish() == []


# ------------------------------------------------------------------ the probe, for real


def test_probe_names_no_container_for_this_host(tmp_path: Path) -> None:
    """The probe on this machine (in no container) and a helper process: no containers."""
    from hangdoctor.collect.probe import collect

    snap = collect(ProbeConfig(root_pids=[os.getpid()], window_s=0, nvml=False, kernel_log=False))
    assert "containers" not in snap
    assert snap["host"]["in_container"] is None or isinstance(snap["host"]["in_container"], str)
    assert all("container_id" not in p for p in snap["processes"])


# ------------------------------------------------------------------ targets and launchers


def test_parse_target_kinds() -> None:
    assert isinstance(parse_target("docker:vllm"), DockerTarget)
    k = parse_target("k8s:llm/vllm-0/vllm", kube={"context": "c1", "kubeconfig": "/k"})
    assert isinstance(k, K8sTarget)
    assert k.argv_prefix == ["kubectl", "--kubeconfig", "/k", "--context", "c1", "exec", "-i",
                             "-n", "llm", "vllm-0", "-c", "vllm", "--"]
    assert isinstance(parse_target("via:podman exec -i x"), ViaTarget)
    assert type(parse_target("localhost")).__name__ == "LocalTarget"


def test_parse_k8s_spec() -> None:
    assert parse_k8s_spec("k8s:vllm-0") == (None, "vllm-0", None)
    assert parse_k8s_spec("k8s:llm/vllm-0") == ("llm", "vllm-0", None)
    assert parse_k8s_spec("k8s:llm/vllm-0/vllm") == ("llm", "vllm-0", "vllm")
    for bad in ("k8s:", "k8s:a/b/c/d", "k8s:LLM/x", "k8s:ns/Bad_Pod", "k8s:ns/pod/"):
        with pytest.raises(UsageError):
            parse_k8s_spec(bad)


def test_docker_target_argv_and_bad_names() -> None:
    t = DockerTarget("docker:vllm", context="gpu-box", user="0")
    assert t.argv_prefix == ["docker", "--context", "gpu-box", "exec", "-i", "-u", "0", "vllm"]
    assert t.command()[-3:-1] == ["sh", "-c"]
    for bad in ("docker:", "docker:-rm", "docker:a b"):
        with pytest.raises(UsageError):
            DockerTarget(bad)


def test_via_quotes_the_script_only_for_ssh() -> None:
    plain = ViaTarget("nsenter -t 4242 -a")
    assert plain.command()[:6] == ["nsenter", "-t", "4242", "-a", "sh", "-c"]
    ssh = ViaTarget("ssh -J bastion gpu-node-3")
    cmd = ssh.command()
    assert cmd[:4] == ["ssh", "-J", "bastion", "gpu-node-3"] and len(cmd) == 5
    assert cmd[4].startswith("sh -c '")
    with pytest.raises(UsageError):
        ViaTarget("")
    with pytest.raises(UsageError):
        ViaTarget("docker exec 'unterminated")


def test_split_selector() -> None:
    assert split_selector("app=vllm") == (None, "app=vllm")
    assert split_selector("llm/app=vllm,tier!=x") == ("llm", "app=vllm,tier!=x")
    assert split_selector("app.kubernetes.io/name=vllm") == (None, "app.kubernetes.io/name=vllm")
    assert split_selector("llm/app.kubernetes.io/name=vllm") == ("llm", "app.kubernetes.io/name=vllm")
    assert is_launcher_spec("slurm:4242") and is_launcher_spec("k8s:app=x")
    assert not is_launcher_spec("hosts.txt") and not is_launcher_spec(None)


def test_pod_facts_from_recorded_kubectl_output() -> None:
    pod = json.loads((RECORDED / "pod-vllm-0.json").read_text())
    f = pod_facts(pod)  # no -c: the default-container annotation, as kubectl exec does
    assert f["name"] == "vllm" and f["pod"] == "vllm-0" and f["namespace"] == "llm"
    assert f["engine"] == "containerd" and f["id"] == K_ID and f["node"] == "gpu-node-07"
    assert f["last_exit_reason"] == "OOMKilled" and f["oom_killed"] is True
    assert f["memory_limit_bytes"] == 512 << 30 and f["cpu_limit_cores"] == 32.0
    assert f["shm_volume"] == "dshm" and f["shm_size_bytes"] == 16 << 30
    assert f["cap_add"] == ["IPC_LOCK"] and f["ipc_mode"] == "pod"
    side = pod_facts(pod, "metrics")
    assert side["name"] == "metrics" and "shm_volume" not in side and "oom_killed" not in side


def test_error_lines() -> None:
    cases = [
        (docker_error("docker:x", "x", "Error: No such container: x", 1), "no container named 'x'"),
        (docker_error("docker:x", "x", "Error response from daemon: Container 3f2a is not running", 1),
         "nothing to probe"),
        (docker_error("docker:x", "x", "permission denied while trying to connect to the Docker "
                      "daemon socket at unix:///var/run/docker.sock", 1), "docker group"),
        (docker_error("docker:x", "x", 'OCI runtime exec failed: exec failed: unable to start '
                      'container process: exec: "sh": executable file not found in $PATH', 126),
         "distroless"),
        (kubectl_error("k8s:p", 'Error from server (NotFound): pods "p" not found', 1), "get pods -A"),
        (kubectl_error("k8s:p", 'error: container nope is not valid for pod p', 1), "k8s:NS/POD/CONTAINER"),
        (kubectl_error("k8s:p", 'Error from server (Forbidden): pods "p" is forbidden: User "dev" '
                       'cannot create resource "pods/exec"', 1), "pods/exec"),
        (kubectl_error("k8s:p", "The connection to the server localhost:8080 was refused - did you "
                       "specify the right host or port?", 1), "--kubeconfig"),
    ]
    for err, remedy_part in cases:
        assert isinstance(err, TargetError) and err.exit_code == 4
        assert remedy_part in err.one_line(), err.one_line()


def test_kubectl_without_a_cluster_recorded() -> None:
    """The real kubectl of this machine, with no cluster configured: klog lines, then the one
    that says what is wrong."""
    text = (RECORDED / "kubectl-exec-no-cluster.stderr").read_text()
    err = kubectl_error("k8s:llm/vllm-0", text, 1)
    assert err.message.startswith("k8s:llm/vllm-0: the cluster is not reachable: The connection to "
                                  "the server localhost:8080 was refused")
    assert "memcache.go" not in err.one_line() and "--kubeconfig / --context" in err.one_line()


def test_log_from_timestamped_lines() -> None:
    lines = ["2026-12-01T08:00:00.000000000Z INFO loading", "2026-12-01T08:00:05.500000000Z INFO done",
             "no stamp"]
    log = log_from_lines(lines, 1796112002.0, "docker logs x")  # 08:00:02 UTC
    assert log["tail"] == ["INFO loading", "INFO done", "no stamp"]
    assert log["grew_bytes"] == len("INFO done") + 1
    assert log["mtime"] == pytest.approx(1796112005.5)


def test_parse_snapshot_skips_notices() -> None:
    line = json.dumps({"schema_version": 1, "x": 1}).encode()
    assert parse_snapshot(b"srun: job 4242 step 3 created\n" + line + b"\n") == {"schema_version": 1, "x": 1}
    assert parse_snapshot(b"{not json}\n") is None


def test_merge_runtime_facts_fills_in_and_refixes_ptrace() -> None:
    snap = {
        "containers": [{"id": DOCKER_ID, "short_id": DOCKER_ID[:12], "pids": [1], "probe_inside": True,
                        "runtime": "docker", "shm": {"total_bytes": 1}}],
        "processes": [{"pid": 1}, {"pid": 7}],
        "stacks": {"7": {"status": "denied", "denied_reason": "no-cap-other-uid", "remedy": "x"}},
        "manifest": [{"source": "stacks:7", "status": "denied", "remedy": "x"},
                     {"source": "stacks", "status": "denied", "remedy": "x"}],
    }
    facts = {"runtime": "kubernetes", "id": K_ID, "name": "vllm", "pod": "vllm-0",
             "namespace": "llm", "node": "gpu-node-07"}
    entry = merge_runtime_facts(snap, facts)
    assert entry["id"] == DOCKER_ID and entry["node"] == "gpu-node-07" and entry["pids"] == [1, 7]
    assert snap["processes"][1]["container_id"] == DOCKER_ID[:12]
    for m in snap["manifest"]:
        assert "kubectl debug -it vllm-0 -n llm" in m["remedy"]


def test_shell_script_is_posix_sh() -> None:
    sh = shutil.which("dash") or shutil.which("sh")
    assert sh
    script = shell_script()
    check = os.popen(f"{sh} -n -c {json.dumps(script)} 2>&1").read()  # noqa: S605 - a syntax check
    assert check == ""


def test_exec_pipe_against_a_shell_without_python(tmp_path: Path) -> None:
    """A target whose PATH has sh but no python: one line, exit 4, and what to do."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "dirname", "id"):
        src = shutil.which(tool)
        assert src
        os.symlink(src, bin_dir / tool)
    env = {"PATH": str(bin_dir)}
    target = ExecPipeTarget("via:bare", [shutil.which("env") or "/usr/bin/env", f"PATH={bin_dir}"],
                            env=env)
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0, deadline_s=5)))
    assert "no python3 or python in the target" in info.value.message
    assert "diagnose it from the host" in (info.value.remedy or "")


def test_exec_pipe_runs_the_probe_through_a_plain_shell(tmp_path: Path) -> None:
    """The whole exec pipe, with `env` as the 'runtime': the probe runs on this host,
    py-spy is found on the PATH given, and the snapshot comes back."""
    venv_bin = str(Path(sys.executable).parent)
    target = ExecPipeTarget("via:env", ["env", f"PATH={venv_bin}:/usr/bin:/bin"])
    snap = asyncio.run(target.collect(ProbeConfig(root_pids=[os.getpid()], window_s=0,
                                                  deadline_s=10, nvml=False)))
    assert snap["schema_version"] == 1 and snap["host"]["name"] == "via:env"
    m = {e["source"]: e for e in snap["manifest"]}
    assert m["exec"]["status"] == "ok" and "env PATH=" in m["exec"]["detail"]
    assert snap["target"]["kind"] == "via"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_command_that_never_reads_its_input_is_given_up_on(tmp_path: Path) -> None:
    """Every step has its deadline: a command that does not read the probe (a prompt, a
    wedged runtime) is stopped after the start deadline, its process group killed."""
    pidfile = tmp_path / "pid"
    cmd = [sys.executable, "-c", f"import os,time; open({str(pidfile)!r},'w').write(str(os.getpid())); time.sleep(60)"]
    target = ExecPipeTarget("via:stuck", cmd, start_timeout_s=1.0)
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0, deadline_s=5)))
    assert "did not read its input within 1 s" in info.value.message
    assert "unattended" in (info.value.remedy or "")
    assert _gone(int(pidfile.read_text()))


def test_a_command_that_reads_but_never_answers_is_given_up_on(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    cmd = [sys.executable, "-c", f"import os,sys,time; open({str(pidfile)!r},'w').write(str(os.getpid())); "
           "sys.stdin.buffer.read(); time.sleep(60)"]
    target = ExecPipeTarget("via:silent", cmd, start_timeout_s=1.0)
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0, deadline_s=5)))
    assert "gave no answer within 1 s" in info.value.message
    assert _gone(int(pidfile.read_text()))
