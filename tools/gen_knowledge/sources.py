"""Where the generator reads from: a wheel (a zip, read without installing it), a bare git
repository snapshot (read with ``git show``), the running interpreter's standard library, or a
plain folder (the test fixtures). Each source knows its package, version and origin."""

from __future__ import annotations

import fnmatch
import glob
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path


class Source:
    package: str
    version: str
    origin: str

    def names(self) -> list[str]:
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def text(self, name: str) -> str:
        return self.read(name).decode("utf-8", "replace")

    def match(self, pattern: str) -> list[str]:
        """Files matching a glob (``*`` does not cross '/', ``**`` does), sorted."""
        rx = _glob_regex(pattern)
        return sorted(n for n in self.names() if rx.fullmatch(n))

    def describe(self) -> dict:
        return {"package": self.package, "version": self.version, "origin": self.origin}


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        else:
            out += fnmatch.translate(pattern[i])[4:-3] if pattern[i] in "?[" else re.escape(pattern[i])
            i += 1
    return re.compile(out)


class WheelSource(Source):
    def __init__(self, path: Path, package: str, version: str) -> None:
        self.path = path
        self.package, self.version = package, version
        self.origin = f"pip:{package}=={version}"
        self._zip = zipfile.ZipFile(path)
        self._names = sorted(self._zip.namelist())

    def names(self) -> list[str]:
        return self._names

    def read(self, name: str) -> bytes:
        return self._zip.read(name)


class SdistSource(Source):
    """A source distribution (.tar.gz) read without building it: the C/C++ a Python package
    vendors (llama-cpp-python carries llama.cpp under vendor/llama.cpp). Names are relative to
    the archive's top folder."""

    def __init__(self, path: Path, package: str, version: str) -> None:
        self.path = path
        self.package, self.version = package, version
        self.origin = f"pip:{package}=={version}"
        self._tar = tarfile.open(path, "r:gz")
        self._members = {}
        for m in self._tar.getmembers():
            if m.isfile():
                self._members[m.name.partition("/")[2]] = m
        self._names = sorted(self._members)

    def describe(self) -> dict:
        d = super().describe()
        d["archive"] = "sdist"
        return d

    def names(self) -> list[str]:
        return self._names

    def read(self, name: str) -> bytes:
        f = self._tar.extractfile(self._members[name])
        assert f is not None
        return f.read()


class GitSource(Source):
    """A repository read at one commit (``rev``, default HEAD) without a work tree: a bare
    snapshot or the .git of a clone."""

    def __init__(self, git_dir: Path, package: str, rev: str = "HEAD") -> None:
        self.git_dir = git_dir / ".git" if (git_dir / ".git").is_dir() else git_dir
        self.package = package
        self.version = self._git("rev-parse", f"{rev}^{{commit}}").strip()
        self.origin = f"git:{package}@{self.version}"
        self.ref = rev
        self._names = sorted(self._git("ls-tree", "-r", "--name-only", self.version).splitlines())

    def describe(self) -> dict:
        d = super().describe()
        if self.ref not in ("HEAD", self.version):
            d["ref"] = self.ref  # the tag the commit was asked for (v2.21.5-1), not a sha
        return d

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", *args], check=True,
                              capture_output=True, text=True).stdout

    def names(self) -> list[str]:
        return self._names

    def read(self, name: str) -> bytes:
        return subprocess.run(["git", f"--git-dir={self.git_dir}", "show", f"{self.version}:{name}"],
                              check=True, capture_output=True).stdout


class DirSource(Source):
    """A folder laid out like the package (the test fixtures, or an unpacked tree)."""

    def __init__(self, root: Path, package: str, version: str, origin: str) -> None:
        self.root = root
        self.package, self.version, self.origin = package, version, origin
        self._names = sorted(str(p.relative_to(root)).replace(os.sep, "/")
                             for p in root.rglob("*") if p.is_file())

    def names(self) -> list[str]:
        return self._names

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()


def stdlib_source() -> DirSource:
    """The running interpreter's Lib/: multiprocessing, queue, threading, asyncio, socket."""
    root = Path(sysconfig.get_paths()["stdlib"])
    ver = platform.python_version()
    src = DirSource.__new__(DirSource)
    src.root, src.package, src.version, src.origin = root, "cpython", ver, f"stdlib:{ver}"
    src._names = sorted(str(p.relative_to(root)).replace(os.sep, "/")
                        for sub in ("multiprocessing", "asyncio", "concurrent", "importlib")
                        for p in (root / sub).rglob("*.py")) + sorted(
        p.name for p in root.glob("*.py"))
    return src


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_path(cache: Path, package: str, version: str) -> Path:
    """The wheel for package==version in the cache, downloaded with pip when it is not there."""
    cache.mkdir(parents=True, exist_ok=True)

    def find() -> Path | None:
        for p in sorted(cache.glob("*.whl")):
            name, _, rest = p.name.partition("-")
            ver = rest.split("-", 1)[0]
            if _norm(name) == _norm(package) and ver.split("+")[0] == version:
                return p
        return None

    found = find()
    if found is None:
        print(f"gen_knowledge: pip download {package}=={version}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:",
                        "--only-binary", ":all:", f"{package}=={version}", "-d", str(cache)],
                       check=True, stdout=subprocess.DEVNULL)
        found = find()
    if found is None:
        raise FileNotFoundError(f"no wheel for {package}=={version} in {cache}")
    return found


def sdist_path(cache: Path, package: str, version: str) -> Path:
    """The source distribution for package==version in the cache, downloaded with pip when it
    is not there (pip prepares its metadata, which installs the build requirements into an
    isolated folder; nothing is built or installed here)."""
    cache.mkdir(parents=True, exist_ok=True)

    def find() -> Path | None:
        for p in sorted(cache.glob("*.tar.gz")):
            name, _, ver = p.name[: -len(".tar.gz")].rpartition("-")
            if _norm(name) == _norm(package) and ver == version:
                return p
        return None

    found = find()
    if found is None:
        print(f"gen_knowledge: pip download {package}=={version} (sdist)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"{package}=={version}", "-d", str(cache)], check=True, stdout=subprocess.DEVNULL)
        found = find()
    if found is None:
        raise FileNotFoundError(f"no sdist for {package}=={version} in {cache}")
    return found


def cached_glob(cache: Path, pattern: str) -> list[str]:
    return sorted(glob.glob(str(cache / pattern)))
