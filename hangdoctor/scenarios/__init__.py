"""Real hung-server scenarios: small programs that reach the states hangdoctor diagnoses.

Each is runnable as ``python3 -m hangdoctor.scenarios.<name>`` (see ``SCENARIOS``), starts its
own session, writes a JSON ready file once it reached its state (``--ready-file``) and ends by
itself after ``--max-lifetime`` seconds, workers included. ``runner`` starts one and waits for it.
They are used by the tests and by ``hangdoctor demo``; only ``gloo_desync`` needs torch.

Layer: scenarios; may import: the standard library, torch and hangdoctor.scenarios (each runs as
its own program).
"""

from __future__ import annotations

from hangdoctor.scenarios.launch import (
    SCENARIOS,
    RunningScenario,
    ScenarioError,
    ScenarioInfo,
    scenario_argv,
    start_scenario,
)

__all__ = [
    "SCENARIOS",
    "RunningScenario",
    "ScenarioError",
    "ScenarioInfo",
    "scenario_argv",
    "start_scenario",
]
