"""Where the evidence lives. Everything that touches the outside world sits behind a Target.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
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

    def __setattr__(self, key: str, value: Any) -> None:
        # the host table, error lines and the JSON all read these: the target's stderr and a
        # --via command or user:password@host spec must not reach them raw (set at any time)
        if key in ("name", "error", "remedy") and isinstance(value, str):
            from hangdoctor.redact import redact_text

            value = redact_text(value)
        elif key == "notes" and isinstance(value, list):
            from hangdoctor.redact import redact_text

            value = _RedactedList(redact_text(v) if isinstance(v, str) else v for v in value)
        object.__setattr__(self, key, value)


class _RedactedList(list):
    """A list whose appended strings are redacted (HostResult.notes)."""

    def append(self, item: Any) -> None:
        from hangdoctor.redact import redact_text

        super().append(redact_text(item) if isinstance(item, str) else item)
