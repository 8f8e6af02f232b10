"""Where the evidence lives. Everything that touches the outside world sits behind a Target.

Layer: target; may import: the standard library, asyncssh, psutil, hangdoctor.target,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from hangdoctor.collect.config import ProbeConfig


class Target(Protocol):
    """A host to collect from. ``collect`` runs the probe there once and returns its snapshot.

    It raises :class:`hangdoctor.errors.TargetError` when the host cannot be used at all
    (unreachable, auth failure, host key refused); anything less is recorded in the
    snapshot's manifest instead.

    ``on_started``, when given, is called once the probe is running on the host (its command
    sent, or its thread started): from then on the caller's own work no longer slows the
    connection or the probe's first sample.
    """

    name: str

    async def collect(
        self, config: ProbeConfig, on_started: Optional[Callable[[], None]] = None
    ) -> dict[str, Any]: ...


@dataclass
class HostResult:
    """The outcome for one host: a snapshot, or the error that stopped it (or both: partial)."""

    name: str
    snapshot: dict[str, Any] | None = None
    error: str | None = None
    remedy: str | None = None
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)
