"""Host specs, -o options, --pid mapping, hosts files, and reading the probe's stdout."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from hangdoctor.errors import UsageError
from hangdoctor.reach.multi import (
    hosts_file_pid_args,
    parse_host_spec,
    parse_pid_args,
    read_hosts_file,
)
from hangdoctor.reach.pyspy_binary import elf_arch, find_local_pyspy, normalise_arch
from hangdoctor.reach.ssh import SshTarget, parse_snapshot
from hangdoctor.reach.sshconfig import HostSpec, parse_host, parse_ssh_options


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("gpu-node-3", HostSpec("gpu-node-3")),
        ("root@gpu-node-3", HostSpec("gpu-node-3", "root")),
        ("root@10.0.0.5:2222", HostSpec("10.0.0.5", "root", 2222)),
        ("node:22", HostSpec("node", None, 22)),
        ("[::1]:2200", HostSpec("::1", None, 2200)),
        ("me@[fe80::1]", HostSpec("fe80::1", "me")),
        ("fe80::1", HostSpec("fe80::1")),
        ("a@b@host", HostSpec("host", "a@b")),
    ],
)
def test_parse_host(spec: str, expected: HostSpec) -> None:
    assert parse_host(spec) == expected


@pytest.mark.parametrize("spec", ["", "@host", "host:port", "host:70000", "[::1", "[::1]x"])
def test_parse_host_rejects(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_host(spec)


def test_parse_ssh_options() -> None:
    parsed = parse_ssh_options(
        [
            "-o Port=2222",
            "-oUser=ubuntu",
            "identityfile=~/.ssh/a",
            "IdentityFile ~/.ssh/b",
            "StrictHostKeyChecking=accept-new",
            "ConnectTimeout=3",
        ]
    )
    assert parsed == {
        "Port": ["2222"],
        "User": ["ubuntu"],
        "IdentityFile": ["~/.ssh/a", "~/.ssh/b"],
        "StrictHostKeyChecking": ["accept-new"],
        "ConnectTimeout": ["3"],
    }


@pytest.mark.parametrize(
    "option, words",
    [
        ("ForwardAgent=yes", "not supported"),
        ("Port=abc", "not a number"),
        ("StrictHostKeyChecking=maybe", "not understood"),
        ("ConnectTimeout=soon", "not a number"),
        ("Port=", "not Key=Value"),
    ],
)
def test_parse_ssh_options_rejects(option: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_ssh_options([option])
    assert words in info.value.message


def test_target_option_precedence(tmp_path: Path) -> None:
    target = SshTarget(
        "alice@node:2200",
        ssh_options=["Port=22", "User=bob", "IdentityFile=/k2", "UserKnownHostsFile=/kh"],
        identity=["/k1"],
        config_path=[],
    )
    kwargs = target._connect_kwargs()
    # What the user typed in HOST wins over -o, like ssh's command line over its config.
    assert kwargs["port"] == 2200 and kwargs["username"] == "alice"
    assert kwargs["client_keys"] == ["/k1", "/k2"]
    assert kwargs["known_hosts"] == "/kh"
    assert kwargs["config"] is None
    off = SshTarget("node", ssh_options=["StrictHostKeyChecking=no"], config_path=[])
    assert off._connect_kwargs()["known_hosts"] is None  # only when asked for in so many words
    default = SshTarget("node", config_path=[])
    assert "known_hosts" not in default._connect_kwargs()  # asyncssh: ~/.ssh/known_hosts


def test_remote_env_names_are_checked() -> None:
    with pytest.raises(UsageError):
        SshTarget("node", remote_env={"BAD NAME; rm -rf /": "x"})


def test_parse_host_spec_local_and_ssh() -> None:
    ssh = parse_host_spec("127.0.0.1", config_path=[])
    assert isinstance(ssh, SshTarget) and ssh.name == "127.0.0.1"
    local_module = pytest.importorskip("hangdoctor.reach.local")
    for name in ("localhost", "local", "LOCALHOST"):
        assert isinstance(parse_host_spec(name), local_module.LocalTarget)


def test_parse_pid_args() -> None:
    assert parse_pid_args(["123", "124", "123"], ["node"]) == {"node": [123, 124]}
    hosts = ["root@a:2222", "b"]
    assert parse_pid_args(["root@a:2222:5", "b:7", "b:8"], hosts) == {
        "root@a:2222": [5],
        "b": [7, 8],
    }
    assert parse_pid_args([], hosts) == {"root@a:2222": [], "b": []}


@pytest.mark.parametrize(
    "pids, hosts, words",
    [
        (["123"], ["a", "b"], "ambiguous with 2 hosts"),
        (["c:1"], ["a", "b"], "not among the hosts given"),
        (["a:x"], ["a"], "not a process id"),
        (["0"], ["a"], "positive"),
        ([":5"], ["a"], "no host before"),
    ],
)
def test_parse_pid_args_rejects(pids: list[str], hosts: list[str], words: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_pid_args(pids, hosts)
    assert words in info.value.message


def test_hosts_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(
        "# the TP group\n"
        "gpu-node-1 pid=46294\n"
        "\n"
        "root@gpu-node-2:2222   pid=1001,1002  # rank 2 and 3\n"
        "gpu-node-3\n"
        "gpu-node-1 pid=46295\n"
    )
    hosts = read_hosts_file(str(path))
    assert hosts == ["gpu-node-1", "root@gpu-node-2:2222", "gpu-node-3"]
    pid_args = hosts_file_pid_args(str(path))
    assert parse_pid_args(pid_args, hosts) == {
        "gpu-node-1": [46294, 46295],
        "root@gpu-node-2:2222": [1001, 1002],
        "gpu-node-3": [],
    }


def test_hosts_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        read_hosts_file(str(tmp_path / "missing"))
    assert "cannot read hosts file" in info.value.message
    bad = tmp_path / "bad"
    bad.write_text("node port=22\n")
    with pytest.raises(UsageError) as info:
        read_hosts_file(str(bad))
    assert f"{bad}:1" in info.value.message


def test_parse_snapshot_tolerates_rc_file_noise() -> None:
    assert parse_snapshot(b'{"schema_version": 1, "a": [1]}\n') == {"schema_version": 1, "a": [1]}
    noisy = b'Welcome to node 3!\n{not json\n{"schema_version": 1}\n'
    assert parse_snapshot(noisy) == {"schema_version": 1}
    assert parse_snapshot(b'{"no_version": 1}') is None
    assert parse_snapshot(b"") is None
    assert parse_snapshot(b"Traceback (most recent call last):\n") is None


def test_local_pyspy_is_a_real_binary_of_this_arch() -> None:
    path = find_local_pyspy()
    assert path is not None, "py-spy is a dependency and must be found"
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"  # never a pyenv shim script
    assert elf_arch(path) == normalise_arch(platform.machine())


def test_find_local_pyspy_skips_scripts(tmp_path: Path) -> None:
    shim = tmp_path / "py-spy"
    shim.write_text('#!/bin/sh\nexec real-py-spy "$@"\n')
    shim.chmod(0o755)
    assert elf_arch(str(shim)) is None
    assert find_local_pyspy(str(shim)) != os.path.realpath(shim)


def test_normalise_arch() -> None:
    assert normalise_arch("amd64") == "x86_64"
    assert normalise_arch("arm64\n") == "aarch64"
    assert normalise_arch("armv7l") == "arm"
