"""Build the self-contained probe script that runs on a target host with its own Python.

The probe modules (stdlib only, optional psutil / pynvml, Python 3.8+) are shipped as source
and executed under their real module names, so the same ``import`` lines work on the remote
as in the package. Run it as ``python3 -`` with the script on stdin; it prints one JSON
snapshot on stdout and nothing else.
"""

from __future__ import annotations

import json
from importlib import resources

# Order matters: a module may import only those before it.
PROBE_MODULES = [
    "hangdoctor.redact",
    "hangdoctor.collect.config",
    "hangdoctor.collect.procfs",
    "hangdoctor.collect.pyspy",
    "hangdoctor.collect.nvml",
    "hangdoctor.collect.processes",
    "hangdoctor.collect.sources",
    "hangdoctor.collect.probe",
]

_BOOT = r'''
import sys, types, json
def _hd_install(name, src):
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            m = types.ModuleType(pkg); m.__path__ = []; sys.modules[pkg] = m
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], m)
    mod = types.ModuleType(name); mod.__file__ = "<hangdoctor:" + name + ">"
    sys.modules[name] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    if len(parts) > 1:
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], mod)
'''


def _module_source(name: str) -> str:
    pkg, _, leaf = name.rpartition(".")
    return resources.files(pkg).joinpath(leaf + ".py").read_text(encoding="utf-8")


def build_probe_script(config: dict) -> str:
    """Return Python source that collects one snapshot with ``config`` and prints it as JSON."""
    lines = [_BOOT]
    for name in PROBE_MODULES:
        lines.append("_hd_install(%r, %r)" % (name, _module_source(name)))
    lines.append("from hangdoctor.collect import probe as _p")
    lines.append("_p.main_json(%r)" % json.dumps(config))
    return "\n".join(lines) + "\n"
