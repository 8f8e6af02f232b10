"""A new user's first run, replayed from the README on a fresh copy of the repository.

The README's "Two commands on a fresh machine" are run exactly as written, in a shell whose
PATH has no virtual environment (nothing activated, no `hangdoctor` on it), the second one in a
real terminal held by tmux at 80 x 24 and at 200 x 50. The whole answer (verdict, causes, the
next command, where the report went) must be on that one screen, and the command it says to
run next must run as printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, need

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
SECTION = "## Two commands on a fresh machine"
INSTALL_TIMEOUT_S = 420.0
DEMO_TIMEOUT_S = 120.0


def readme_commands(readme: str) -> tuple[list[str], str]:
    """The code block of the README's two-command section: its lines, and the prose after it."""
    start = readme.index(SECTION)
    rest = readme[start + len(SECTION) :]
    block = re.search(r"```\n(.*?)```", rest, re.S)
    assert block, "the two-command section has no code block"
    lines = [x for x in block.group(1).splitlines() if x.strip()]
    after = rest[block.end() : rest.find("\n## ", block.end())]
    return lines, after


def clean_env() -> dict[str, str]:
    """A new user's shell: no virtual environment on PATH, no PYTHONPATH into this checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS", "LINES")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p and "/venv" not in p
    )
    env.pop("NO_COLOR", None)
    return env


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files as a clone has them (tracked and not ignored), installed with the
    README's first command."""
    dest = tmp_path_factory.mktemp("fresh") / "hangdoctor"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, timeout=60,
    )  # fmt: skip
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files a clone has")
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = REPO_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    commands, _ = readme_commands((dest / "README.md").read_text(encoding="utf-8"))
    assert len(commands) == 2, commands
    env = clean_env()
    assert shutil.which("hangdoctor", path=env["PATH"]) is None, "hangdoctor is on the clean PATH"
    proc = subprocess.run(["bash", "-c", commands[0]], cwd=dest, env=env, capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return dest


def run_in_tmux(cwd: Path, command: str, cols: int, rows: int) -> str:
    """Run ``command`` in a fresh tmux terminal of ``cols`` x ``rows``; the screen at the end."""
    tmux = shutil.which("tmux")
    need(tmux is not None, "tmux")
    name = f"hd-newuser-{os.getpid()}-{cols}"
    marker = "__HD_DONE__"
    env = clean_env()
    script = cwd / f".newuser-{cols}.sh"
    # `clear` first: the screen then holds only what the command printed
    script.write_text(f"clear\ncd {cwd}\n{command}\necho {marker} $?\nsleep 600\n")
    subprocess.run(
        [tmux, "-f", "/dev/null", "new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows),
         f"env -u COLUMNS -u LINES bash --noprofile --norc {script}"],
        env=env, check=True, timeout=30,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        screen = ""
        while time.monotonic() < deadline:
            screen = subprocess.run([tmux, "capture-pane", "-p", "-t", name], capture_output=True,
                                    text=True, timeout=30).stdout  # fmt: skip
            if marker in screen:
                break
            time.sleep(0.5)
        assert marker in screen, f"the command did not finish in {DEMO_TIMEOUT_S:g} s:\n{screen}"
        return screen
    finally:
        subprocess.run([tmux, "kill-session", "-t", name], capture_output=True, timeout=30)


def unwrap(lines: list[str]) -> str:
    """Join the summary's next command, which wraps with ` \\` continuations."""
    out = ""
    for line in lines:
        out += line.rstrip()[:-1].rstrip() + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            break
    return out


@pytest.mark.parametrize(("cols", "rows"), [(80, 24), (200, 50)])
def test_the_readme_first_run_shows_the_whole_answer_on_one_screen(
    fresh_clone: Path, cols: int, rows: int
):
    commands, after = readme_commands((fresh_clone / "README.md").read_text(encoding="utf-8"))
    screen = run_in_tmux(fresh_clone, commands[1], cols, rows)
    lines = screen.rstrip("\n").split("\n")
    text = "\n".join(lines)
    assert "__HD_DONE__ 0" in text, text  # the demo ran and stopped its server
    marker_at = next(i for i, x in enumerate(lines) if "__HD_DONE__" in x)
    shown = lines[:marker_at]
    # the whole run, first line to last, is on this one screen (the screen was cleared first)
    assert shown[0].startswith("hangdoctor demo: starting"), text
    assert len(shown) < rows - 1, text  # room to spare: the prompt after it fits too
    assert any(x.startswith("hangdoctor: HUNG") for x in shown), text
    assert any(re.match(r"\s+1\. post-load-deadlock\s+0\.\d\d", x) for x in shown), text
    assert any(x.startswith("report: hangdoctor-demo.html") for x in shown), text
    assert any("the demo server was stopped" in x for x in shown), text
    # no line is wider than the terminal, so nothing wrapped off the screen unseen
    assert all(len(x) <= cols for x in shown), text
    # the next command is whole, and written as this shell can run it
    nxt = next(i for i, x in enumerate(shown) if x.startswith("  next: "))
    body = shown[nxt:]
    if body[0].startswith("  next: # "):
        body = body[1:]
        body[0] = "  next: " + body[0].strip()
    command = unwrap([body[0][len("  next: ") :]] + body[1:])
    assert command.startswith(".venv/bin/hangdoctor diagnose localhost --pid "), (command, text)
    assert "…" not in command
    # the follow-up the demo prints runs as printed, without an activated venv
    follow = next(x.strip() for x in shown if x.strip().startswith(".venv/bin/hangdoctor diagnose localhost")
                  and "<server pid>" in x)  # fmt: skip
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        cmd = follow.replace("<server pid>", str(sleeper.pid)).replace(
            "-o report.html", "--window 0.2"
        )
        proc = subprocess.run(["bash", "-c", cmd], cwd=fresh_clone, env=clean_env(), capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode in (3, 5, 7), proc.stdout + proc.stderr  # a diagnosis, not 127
    assert "not a Python process" in proc.stdout, proc.stdout
    # and the README's own follow-up says the same command
    assert ".venv/bin/hangdoctor diagnose localhost --pid <server pid>" in after


def test_python_dash_m_is_the_same_program(fresh_clone: Path):
    proc = subprocess.run([".venv/bin/python", "-m", "hangdoctor", "--version"], cwd=fresh_clone,
                          env=clean_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("hangdoctor"), proc.stderr
    assert sys.executable  # the suite's own interpreter is not the one tested here
