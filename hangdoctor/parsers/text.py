"""Line hygiene shared by the parsers.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

from typing import Iterable, Iterator

# Longer lines are cut before any regex sees them: hostile input must stay linear-time.
MAX_LINE_CHARS = 16384


def clip_lines(lines: Iterable[str], max_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Yield lines without their line ending, cut to ``max_chars``; non-str items are skipped."""
    for raw in lines:
        if not isinstance(raw, str):
            continue
        line = raw.rstrip("\r\n")
        yield line[:max_chars] if len(line) > max_chars else line
