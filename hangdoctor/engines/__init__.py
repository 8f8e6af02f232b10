"""Engine models: one module per inference engine (vLLM, SGLang, TGI, TensorRT-LLM), each an
:class:`~hangdoctor.engines.spec.EngineModel` made of data. ``detect`` names the engine of a
process tree from its command lines; the evidence view (:mod:`hangdoctor.evidence.engine_view`) asks
the model what each process is and what phase its stack is in.

Layer: engines; may import: the standard library and hangdoctor.engines (engine models are
data).
"""

from __future__ import annotations

from typing import Iterable

from hangdoctor.engines import sglang, tgi, trtllm, vllm
from hangdoctor.engines.spec import EngineModel

ENGINES: tuple[EngineModel, ...] = (vllm.MODEL, sglang.MODEL, tgi.MODEL, trtllm.MODEL)
BY_NAME: dict[str, EngineModel] = {e.name: e for e in ENGINES}


def detect(cmdlines: Iterable[str]) -> EngineModel | None:
    """The engine most of these command lines belong to (ties: the catalogue's order)."""
    counts: dict[str, int] = {}
    for text in cmdlines:
        for e in ENGINES:
            if e.detect.search(text):
                counts[e.name] = counts.get(e.name, 0) + 1
                break
    if not counts:
        return None
    best = max(ENGINES, key=lambda e: (counts.get(e.name, 0), -ENGINES.index(e)))
    return best if counts.get(best.name) else None


__all__ = ["ENGINES", "BY_NAME", "EngineModel", "detect"]
