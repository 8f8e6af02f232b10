"""Build the self-contained probe script that runs on a target host with its own Python.

The probe modules (stdlib only, optional psutil / pynvml, Python 3.8+) are shipped inside the
script and imported under their real module names through a finder of their own, so the same
``import`` lines work on the remote as in the package; a module is executed when it is first
imported (the NVML adapter only in the thread that samples the GPUs). Each module travels as
zlib-compressed source, plus its compiled code for this interpreter: a remote Python of the
same version loads that and skips compiling (~40 ms); any other compiles the source.

Run it with ``python3 -c 'import sys; exec(compile(sys.stdin.buffer.read(), ...))'`` and the
script on stdin (``python3 -`` works too, but reads long lines slowly); it prints one JSON
snapshot on stdout and nothing else.

Layer: collect; may import: the standard library only (it runs here and packs PROBE_MODULES; it is not shipped itself).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import marshal
import zlib
from importlib import resources

# In dependency order (each after the modules it imports); all are shipped, each runs when
# first imported.
PROBE_MODULES = [
    "hangdoctor.redact",
    "hangdoctor.collect.config",
    "hangdoctor.collect.procfs",
    "hangdoctor.collect.target_fs",
    "hangdoctor.collect.pyspy",
    "hangdoctor.collect.nvml_records",
    "hangdoctor.collect.nvml_watch",
    "hangdoctor.collect.nvml_pynvml",
    "hangdoctor.collect.nvml_smi",
    "hangdoctor.collect.nvml",
    "hangdoctor.collect.processes",
    "hangdoctor.collect.cgroups",
    "hangdoctor.collect.container_runtime",
    "hangdoctor.collect.ptrace_denial",
    "hangdoctor.collect.container",
    "hangdoctor.collect.http_exchange",
    "hangdoctor.collect.sources",
    "hangdoctor.collect.nccl_sources",
    "hangdoctor.collect.locks",
    "hangdoctor.collect.inflight",
    "hangdoctor.collect.metrics",
    "hangdoctor.collect.canary",
    "hangdoctor.collect.engine_sources",
    "hangdoctor.collect.manifest",
    "hangdoctor.collect.tasks",
    "hangdoctor.collect.window_samples",
    "hangdoctor.collect.late_site",
    "hangdoctor.collect.probe_log",
    "hangdoctor.collect.probe_redact",
    "hangdoctor.collect.probe",
]

_BOOT = r'''
import sys, zlib, base64, marshal
from importlib.machinery import ModuleSpec
class _HdFinder(object):
    """Serves the shipped modules: compiled code when it fits this Python, else the source."""
    def __init__(self, tag, modules):
        try:
            from importlib._bootstrap_external import MAGIC_NUMBER as magic
        except ImportError:
            magic = None
        self.same = magic is not None and base64.b64encode(magic).decode() == tag
        self.modules = modules
    def find_spec(self, name, path=None, target=None):
        if name in ("hangdoctor", "hangdoctor.collect"):
            spec = ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = []
            return spec
        if name in self.modules:
            return ModuleSpec(name, self, origin="<hangdoctor:" + name + ">")
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        if module.__name__ not in self.modules:
            return
        src, code = self.modules[module.__name__]
        obj = None
        if self.same and code:
            try:
                obj = marshal.loads(zlib.decompress(base64.b64decode(code)))
            except Exception:
                obj = None
        if obj is None:
            text = zlib.decompress(base64.b64decode(src)).decode("utf-8")
            obj = compile(text, module.__spec__.origin, "exec")
        exec(obj, module.__dict__)
'''


def _module_source(name: str) -> str:
    pkg, _, leaf = name.rpartition(".")
    return resources.files(pkg).joinpath(leaf + ".py").read_text(encoding="utf-8")


def _pack(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 1)).decode("ascii")


_PACKED: dict[str, tuple[str, str]] = {}  # module -> (packed source, packed code); per process


def _source_and_code(name: str) -> tuple[str, bytes]:
    """The module's source and its code, marshalled, both from its loader: the code comes from
    the bytecode cache, checked against that source (~2 ms for all of them). Without such a
    loader the source is read from the package and compiled here (~40 ms)."""
    spec = importlib.util.find_spec(name)
    loader = spec.loader if spec is not None else None
    if loader is not None and hasattr(loader, "get_code") and hasattr(loader, "get_source"):
        try:
            src = loader.get_source(name)
            if src is not None:
                return src, marshal.dumps(loader.get_code(name))
        except (ImportError, OSError, SyntaxError):
            pass
    src = _module_source(name)
    code = compile(src, "<hangdoctor:" + name + ">", "exec", dont_inherit=True)
    return src, marshal.dumps(code)


def _packed_module(name: str) -> tuple[str, str]:
    if name not in _PACKED:
        src, code = _source_and_code(name)
        _PACKED[name] = (_pack(src.encode("utf-8")), _pack(code))
    return _PACKED[name]


def build_probe_script(config: dict, with_code: bool = True) -> str:
    """Return Python source that collects one snapshot with ``config`` and prints it as JSON.

    ``with_code``: also ship this interpreter's compiled code (used by a remote Python of the
    same version); without it every remote compiles the source.
    """
    modules = {}
    for name in PROBE_MODULES:
        src, code = _packed_module(name)
        modules[name] = (src, code if with_code else "")
    tag = base64.b64encode(importlib.util.MAGIC_NUMBER).decode("ascii")
    lines = [
        _BOOT,
        "sys.meta_path.insert(0, _HdFinder(%r, %r))" % (tag, modules),
        "from hangdoctor.collect import probe as _p",
        "_p.main_json(%r)" % json.dumps(config),
    ]
    return "\n".join(lines) + "\n"
