"""The check API (see api.py) and the registry that finds checks.

Layer: checkapi; may import: the standard library, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.knowledge and the foundation.
"""

from hangdoctor.checkapi.api import (
    CLEARED,
    ERRORED,
    FIRED,
    SKIPPED,
    Check,
    Result,
    Signal,
    against,
    check,
    cleared,
    fired,
    skipped,
    support,
)

__all__ = [
    "CLEARED", "ERRORED", "FIRED", "SKIPPED", "Check", "Result", "Signal", "against", "check",
    "cleared", "fired", "skipped", "support",
]
