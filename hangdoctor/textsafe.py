"""Text from the evidence made safe to print or store: terminal escapes, controls, bidi
overrides and lone surrogates.

Whatever a target controls (its process and thread names, its command line, its log, a remote
host's stderr and the host name its snapshot reports) may carry bytes meant for the operator's
terminal: ``ESC [2J`` clears the screen, ``ESC ] 0;...BEL`` retitles the window, ``ESC ] 8``
makes a link that says one thing and opens another, U+202E reverses the text after it. Every
line hangdoctor prints goes through :func:`clean_text`; every string of a snapshot goes through
:func:`clean_value` before analysis (see snapshot/normalize.py).

Layer: foundation; may import: the standard library only.
"""

from __future__ import annotations

import re
from typing import Any

# Whole escape sequences, so nothing of them is left to read as text: CSI (ESC [ ... final),
# OSC (ESC ] ... BEL or ST), DCS/SOS/PM/APC (ESC P/X/^/_ ... ST), the 8-bit forms of CSI and
# OSC (U+009B, U+009D), and any other two-byte ESC sequence.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]{0,64}[ -/]{0,16}[@-~]?"
    r"|\x1b\][^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]{0,4096}(?:\x1b\\|\x9c)?"
    r"|\x9b[0-?]{0,64}[ -/]{0,16}[@-~]?"
    r"|\x9d[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b.?",
    re.DOTALL,
)
# C0 (but tab and newline), DEL and C1 controls
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Bidirectional overrides and isolates: they reorder what follows them on screen (U+202E
# shows "exe.txt" for "txt.exe"), in a terminal, a browser and a GitHub page alike.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: Any) -> str:
    """``text`` with escape sequences removed, other controls shown as ``?``, bidi controls
    removed and lone surrogates replaced (newlines and tabs kept)."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable() and s.isascii():
        return s  # the common case, at C speed
    s = _ESCAPES.sub("", s)
    s = _CONTROLS.sub("?", s)
    s = _BIDI.sub("", s)
    return _SURROGATE.sub("\ufffd", s)


def clean_string(s: str) -> str:
    """A string of the evidence made safe to store and render: bidi controls removed, lone
    surrogates (a non-UTF-8 file name read with surrogateescape) replaced by U+FFFD. Control
    characters are left for each renderer to show its own way."""
    if s.isascii():
        return s
    return _SURROGATE.sub("\ufffd", _BIDI.sub("", s))


def clean_value(value: Any) -> Any:
    """:func:`clean_string` over every string (dict keys too) of JSON-like data, in place for
    lists and dicts where nothing changes."""
    if isinstance(value, str):
        return clean_string(value)
    if isinstance(value, list):
        for i, v in enumerate(value):
            nv = clean_value(v)
            if nv is not v:
                value[i] = nv
        return value
    if isinstance(value, dict):
        changed = [k for k in value if isinstance(k, str) and not k.isascii()]
        for k in changed:
            value[clean_string(k)] = value.pop(k)
        for k, v in value.items():
            nv = clean_value(v)
            if nv is not v:
                value[k] = nv
        return value
    return value
