#!/usr/bin/env bash
# Install everything the tests need and run them: works on a fresh Debian machine as root.
#
#   bash tests/run-all.sh [pytest args...]      (from anywhere; .ci/run calls it)
#
# Phases: system packages (openssh-server, chromium, docker.io; skipped when present), .venv (created when
# missing), the package with its test extras plus torch==2.13.0 (skipped when pyproject.toml is
# unchanged since the last install), then pytest. Each phase's time goes to stderr.
# pytest's "no tests collected" (exit 5) counts as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1
TORCH_PIN="torch==2.13.0"
VENV=.venv
STAMP="$VENV/.hangdoctor-install-stamp"

t_all=$(date +%s)
t_phase=$t_all
phase_done() {
    local now
    now=$(date +%s)
    echo "run-all: $1 took $((now - t_phase)) s" >&2
    t_phase=$now
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        echo "run-all: need root (or sudo) for: $*" >&2
        return 1
    fi
}

# --- system packages: the ssh, browser, terminal and container tests use the real things.
apt_missing=()
[ -x /usr/sbin/sshd ] || apt_missing+=(openssh-server)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
    apt_missing+=(chromium)
# tmux holds an 80- and a 200-column terminal for the new-user test (tests/test_newuser_readme.py)
command -v tmux >/dev/null 2>&1 || apt_missing+=(tmux)
# A Docker engine: the container tests (tests/docker_tools.py) start dockerd themselves when
# none answers (data-root and socket under /tmp/hangdoctor-dockerd) and stop it at the end.
command -v dockerd >/dev/null 2>&1 || apt_missing+=(docker.io)
if [ "${#apt_missing[@]}" -gt 0 ]; then
    echo "run-all: apt-get install ${apt_missing[*]}" >&2
    as_root apt-get update -q
    as_root apt-get install -y -q "${apt_missing[@]}"
fi
phase_done "system packages"

# --- virtual environment
if [ ! -x "$VENV/bin/python" ]; then
    if ! python3 -m venv "$VENV"; then
        # Debian's own python3 keeps venv's pip bootstrap in a separate package.
        rm -rf "$VENV"
        as_root apt-get update -q
        as_root apt-get install -y -q python3-venv
        python3 -m venv "$VENV"
    fi
fi
PY="$VENV/bin/python"
phase_done "venv"

# --- the package, its test extras and torch (CPU, pinned: a local wheel serves it)
want_stamp="$(sha256sum pyproject.toml | cut -d' ' -f1) $TORCH_PIN $("$PY" -V 2>&1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want_stamp" ] ||
    ! "$PY" -c 'import importlib.metadata as m, importlib.util as u
for dist in ("hangdoctor", "pytest", "py-spy"):
    m.version(dist)
assert u.find_spec("torch")' >/dev/null 2>&1; then
    "$PY" -m pip install -q -e '.[test]'
    "$PY" -m pip install -q "$TORCH_PIN"
    echo "$want_stamp" >"$STAMP"
else
    echo "run-all: install skipped (pyproject.toml unchanged since the last install)" >&2
fi
phase_done "pip install"

# --- tests: the venv's scripts (py-spy, hangdoctor) come first on PATH.
export PATH="$PWD/$VENV/bin:$PATH"
rc=0
"$PY" -m pytest -q -p no:cacheprovider "$@" || rc=$?
phase_done "pytest"
echo "run-all: total $(($(date +%s) - t_all)) s" >&2
if [ "$rc" -eq 5 ]; then
    echo "run-all: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
