"""The probe's manifest: one entry per source (ok / timeout / failed / denied / unavailable /
not-given, duration, why, remedy), added to from any of the probe's threads.

Layer: collect; may import: the standard library only (it ships in the probe).
"""

from __future__ import annotations

import threading

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


class Manifest:
    def __init__(self) -> None:
        self.entries: List[Dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, source: str, status: str, duration_s: float = 0.0, detail: Optional[str] = None,
            remedy: Optional[str] = None) -> None:
        with self._lock:
            self.entries.append({
                "source": source, "status": status, "duration_s": round(duration_s, 4),
                "detail": detail, "remedy": remedy,
            })
