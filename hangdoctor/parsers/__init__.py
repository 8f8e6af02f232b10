"""Parsers for evidence pasted into bug tickets (``hangdoctor analyze FILE...``).

``detect`` splits a text into segments and names each one's kind; one module per kind turns a
segment into snapshot pieces; ``assemble`` joins everything into one snapshot dict
(``origin: "pasted"``) so the same checks run on it as on a live snapshot.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

from hangdoctor.errors import InputError

__all__ = ["InputError"]
