"""Site-packages for a probe started with ``python3 -S``: added late, in a thread, without
running the environment's code; and whether a module is there, without importing it.

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import os
import sys
import threading

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

    from hangdoctor.collect.config import ProbeConfig


def _pth_paths_only(sitedir: str, name: str, known_paths: Any) -> Any:
    """``site.addpackage`` without the ``import`` lines: a .pth file's folders are added to
    sys.path, its code is not run."""
    if known_paths is None:
        known_paths = set()
    try:
        with open(os.path.join(sitedir, name), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return known_paths
    for line in lines:
        if not line.strip() or line.startswith(("#", "import ", "import\t")):
            continue
        path = os.path.abspath(os.path.join(sitedir, line.rstrip()))
        if path not in known_paths and os.path.exists(path):
            sys.path.append(path)
            known_paths.add(path)
    return known_paths


def add_site_packages() -> None:
    """The folders of ``site.main()`` (venv, user site, distribution patches included), without
    running the environment's code: no .pth ``import`` lines, no sitecustomize.

    The probe looks there for psutil and pynvml only. The server's environment may run
    anything at start-up (editable-install finders, CA injectors, profilers): 20-50 ms of CPU
    on the host being diagnosed, or worse, and none of it is the probe's business."""
    import site

    site.addpackage = _pth_paths_only
    site.execsitecustomize = site.execusercustomize = lambda: None
    site.main()


def start_site(cfg: ProbeConfig) -> Optional[threading.Thread]:
    """Under ``python3 -S`` with ``late_site``: add site-packages in a thread.

    Only pynvml and the psutil check need site-packages; the probe's first sample need not
    wait for them.
    """
    if not (cfg.late_site and sys.flags.no_site):
        return None

    def load() -> None:
        try:
            add_site_packages()
        except Exception:  # an odd site.py: the stdlib probe does without site-packages
            pass

    thread = threading.Thread(target=load, name="hd-site", daemon=True)
    thread.start()
    return thread


def has_module(name: str) -> bool:
    """Whether the top-level module ``name`` can be imported, without importing it (what
    importlib.util.find_spec does for a top-level name, without importlib.util's ~4 ms)."""
    if name in sys.modules:
        return True
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            if find_spec(name, None) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False
