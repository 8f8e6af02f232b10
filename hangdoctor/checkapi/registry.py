"""Finding checks: built-in, third-party and one-off, all through one mechanism.

A *check module* is any module that defines :class:`Check` objects at top level. Built-in
checks are the modules of ``hangdoctor.checks`` (the repo's ``checks/``), registered through the
``hangdoctor.checks`` entry-point group like any third-party package; ``--checks-dir DIR``
loads every ``*.py`` file there as a check module.

Field knowledge travels the same way: a registered module or package whose folder holds a
knowledge pack (``rules.json``, ``known_issues.json``, ``experiments.json``: see
:mod:`hangdoctor.knowledge.packs`), and a ``--checks-dir`` that holds one, add their rules and
known issues to the built-in ones (``hangdoctor.knowledge``, registered as ``knowledge`` in the
same group).

Layer: checkapi; may import: the standard library, hangdoctor.checkapi, hangdoctor.knowledge
and the foundation.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
from pathlib import Path
from types import ModuleType

from hangdoctor.checkapi.api import Check
from hangdoctor.errors import UsageError
from hangdoctor.knowledge import packs

GROUP = "hangdoctor.checks"
BUILTIN_VALUES = ("hangdoctor.checks", "hangdoctor.knowledge")


def checks_in_module(module: ModuleType) -> list[Check]:
    """Every Check defined in ``module``, and in its submodules when it is a package."""
    found: list[Check] = []
    for value in vars(module).values():
        if isinstance(value, Check) and value.module == module.__name__:
            found.append(value)
    if hasattr(module, "__path__"):
        for info in sorted(pkgutil.iter_modules(module.__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            sub = importlib.import_module(f"{module.__name__}.{info.name}")
            found.extend(checks_in_module(sub))
    return found


def _import_builtin_package() -> ModuleType:
    """``hangdoctor.checks``; from a source checkout that was not pip-installed (PYTHONPATH
    pointing at the repo), the repo's ``checks/`` folder is loaded under that name."""
    try:
        return importlib.import_module("hangdoctor.checks")
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parent.parent.parent / "checks"
        spec = importlib.util.spec_from_file_location(
            "hangdoctor.checks", folder / "__init__.py", submodule_search_locations=[str(folder)])
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules["hangdoctor.checks"] = module
        spec.loader.exec_module(module)
        return module


def builtin_checks() -> list[Check]:
    return checks_in_module(_import_builtin_package())


def _pack_of_module(module: ModuleType, name: str, origin: str) -> packs.Pack | None:
    """The knowledge pack in a check module's folder (a package's own folder), if any."""
    where = getattr(module, "__file__", None)
    if not where:
        return None
    return packs.pack_in(os.path.dirname(where), name, origin)


def _checked_pack(pack: packs.Pack) -> list[str]:
    """Problems that keep a pack out: unreadable files, bad entries."""
    from hangdoctor.knowledge import matcher

    try:
        return [f"knowledge pack {pack.name}: {p}" for p in matcher.validate(pack)]
    except packs.PackError as exc:
        return [f"knowledge pack {pack.name}: {exc}"]


def _entry_points(include_builtin: bool) -> tuple[list[Check], list[packs.Pack], list[str]]:
    """Checks from every installed distribution's ``hangdoctor.checks`` entry points, the
    knowledge packs beside those modules, and the problems loading them."""
    # Imported here (~25 ms with email and csv): a diagnosis loads the checks while its probe
    # samples, and nothing before the connection should wait for it.
    from importlib.metadata import entry_points

    checks: list[Check] = []
    found: list[packs.Pack] = []
    problems: list[str] = []
    for ep in entry_points(group=GROUP):
        if ep.value in BUILTIN_VALUES and not include_builtin:
            continue
        try:
            obj = ep.load()
        except Exception as exc:
            problems.append(f"entry point {ep.name} = {ep.value} failed to load: {exc}")
            continue
        if isinstance(obj, Check):
            checks.append(obj)
        elif isinstance(obj, ModuleType):
            checks.extend(checks_in_module(obj))
            pack = _pack_of_module(obj, f"{ep.name} ({ep.value})", "entry point")
            if pack is not None:
                found.append(pack)
        else:
            problems.append(f"entry point {ep.name} = {ep.value} is neither a Check nor a module")
    return checks, found, problems


def require_checks_dir(path: str) -> Path:
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"--checks-dir {path}: not a directory", "give a folder of check modules")
    return directory


def load_checks_dir(path: str) -> list[Check]:
    """The check modules (``*.py``) of a ``--checks-dir``; its knowledge pack, if it holds one,
    comes from :func:`checks_dir_pack`."""
    directory = require_checks_dir(path)
    out: list[Check] = []
    for file in sorted(directory.glob("*.py")):
        name = f"hangdoctor_user_checks.{file.stem}"
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            raise UsageError(f"check module {file} failed to import: {tb}", "fix or remove it") from exc
        out.extend(checks_in_module(module))
    return out


def checks_dir_pack(path: str) -> packs.Pack | None:
    """The knowledge pack of a ``--checks-dir``; a broken one is refused like a check module that
    fails to import."""
    pack = packs.pack_in(str(require_checks_dir(path)), path, "--checks-dir")
    if pack is None:
        return None
    bad = _checked_pack(pack)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UsageError(bad[0] + more, "fix or remove the knowledge file")
    return pack


def all_checks(checks_dirs: list[str] | None = None, third_party: bool = True) -> tuple[list[Check], list[str]]:
    """Built-in checks (always), then entry-point ones, then ``--checks-dir`` ones; de-duplicated
    by id (the first wins: a third-party check cannot silently replace a built-in one).

    The knowledge packs found on the way (beside entry-point modules, in ``--checks-dir``
    folders) become the active ones (:func:`hangdoctor.knowledge.packs.use`), after the built-in
    pack; a broken entry-point pack is left out with a warning."""
    checks = builtin_checks()
    problems: list[str] = []
    found: list[packs.Pack] = []
    if third_party:
        extra, ep_packs, problems = _entry_points(include_builtin=False)
        checks += extra
        for pack in ep_packs:
            bad = _checked_pack(pack)
            problems.extend(bad[:3])
            if not bad:
                found.append(pack)
    for d in checks_dirs or []:
        checks += load_checks_dir(d)
        pack = checks_dir_pack(d)
        if pack is not None:
            found.append(pack)
    packs.use(found)
    problems.extend(packs.duplicates(packs.active()))
    seen: set[str] = set()
    unique: list[Check] = []
    for c in checks:
        if c.id in seen:
            problems.append(f"check id {c.id} defined twice; the second ({c.module}) is ignored")
            continue
        seen.add(c.id)
        unique.append(c)
    return unique, problems
