"""python -m tools.gen_knowledge [--cache DIR] [--repo NAME=PATH[@REV] ...] [--allow-missing]

Obtains the sources the selectors name (wheels, and the sdists of packages that vendor C/C++
source, by ``pip download --no-deps`` into the cache,
git snapshots from ``--repo``, the running interpreter's standard library), runs the pure
build and writes the two JSON files. Exit 0 when every selector found something, 1 otherwise
(``--allow-missing`` writes anyway), 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.gen_knowledge import build as B
from tools.gen_knowledge import selectors as S
from tools.gen_knowledge.sources import (
    GitSource,
    SdistSource,
    Source,
    WheelSource,
    sdist_path,
    stdlib_source,
    wheel_path,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "hangdoctor" / "knowledge" / "generated"


def load_sources(cache: Path, repos: dict[str, Path], errors: list[str]) -> list[Source]:
    out: list[Source] = []
    for kind, name, version in S.SOURCES:
        try:
            if kind == "pip":
                out.append(WheelSource(wheel_path(cache, name, version), name, version))
            elif kind == "sdist":
                out.append(SdistSource(sdist_path(cache, name, version), name, version))
            elif kind == "git":
                if name not in repos:
                    if not version:  # said once per repository
                        errors.append(f"source {name}: a git repository; pass --repo {name}=PATH")
                    continue
                path, rev = repos[name]
                # a pinned older version is read from the same repository at its tag
                out.append(GitSource(path, name, version or rev))
            elif kind == "stdlib":
                out.append(stdlib_source())
        except Exception as e:  # noqa: BLE001 - one missing source is reported, the rest go on
            errors.append(f"source {kind}:{name}=={version}: {e}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gen_knowledge", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hangdoctor-gen",
                    help="where wheels are downloaded (default ~/.cache/hangdoctor-gen)")
    ap.add_argument("--repo", action="append", default=[], metavar="NAME=PATH[@REV]",
                    help="a git repository (bare, or a clone) for a source that is only a "
                         "repository, read at REV (default HEAD) "
                         f"({', '.join(n for k, n, _ in S.SOURCES if k == 'git')})")
    ap.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    ap.add_argument("--allow-missing", action="store_true",
                    help="write the files even when a source or a selector found nothing")
    args = ap.parse_args(argv)
    repos: dict[str, tuple[Path, str]] = {}
    for r in args.repo:
        name, sep, spec = r.partition("=")
        path, _, rev = spec.partition("@")
        if not sep or not Path(path).exists():
            print(f"gen_knowledge: --repo wants NAME=PATH[@REV] to an existing git dir, got {r!r}",
                  file=sys.stderr)
            return 2
        repos[name] = (Path(path), rev or "HEAD")
    errors: list[str] = []
    sources = load_sources(args.cache / "pip", repos, errors)
    wdoc, mdoc, errs = B.build(sources, S.WAITS, S.MESSAGES)
    errors += errs
    for e in errors:
        print(f"gen_knowledge: {e}", file=sys.stderr)
    if errors and not args.allow_missing:
        print(f"gen_knowledge: {len(errors)} error(s); nothing written (--allow-missing writes anyway)",
              file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "wait_points.json").write_text(B.dumps(wdoc), encoding="utf-8")
    (args.out / "messages.json").write_text(B.dumps(mdoc), encoding="utf-8")
    print(f"gen_knowledge: {len(wdoc['wait_points'])} wait points, {len(mdoc['messages'])} messages "
          f"from {len(wdoc['sources'])} sources -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
