"""Format strings -> tokens -> regex: the one conversion every extractor uses.

A template is kept as the source wrote it; its regex escapes every literal part and turns each
placeholder (printf / Python ``%``, ``{}`` / ``{name}`` / f-string fields, Go ``%v``) into a
wildcard sized to its conversion, so the regex matches any line the format string can print.
Anchored neither side: a logger prefix, a rank tag or a wrapper may stand around it.
"""

from __future__ import annotations

import re

# printf and Python %-style (Go's %v %w %q %T too); '%%' is a literal percent
_PERCENT = re.compile(
    r"%(?:\([^)]*\))?[-#0 +']*(?:\*|\d+)?(?:\.(?:\*|\d+))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t|I64|I32)?[diouxXeEfFgGcrsapnvwqT%]"
)
_BRACE = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
# C's <inttypes.h> macros pasted between string literals: "%" PRIu64 -> "%lu"
PRI_MACROS = re.compile(r"PRI([diouxX])(?:8|16|32|64|PTR|MAX)")

_INT = r"-?\d+"
_HEX = r"[0-9a-fA-Fx]+"
_FLOAT = r"(?:[-+]?[\d.]+(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
_ANY = r".*?"

Token = tuple[str, str]  # ("lit", text) | ("ph", placeholder as written)


def percent_tokens(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    for m in _PERCENT.finditer(text):
        if m.start() > pos:
            out.append(("lit", text[pos:m.start()]))
        out.append(("lit", "%") if m.group() == "%%" else ("ph", m.group()))
        pos = m.end()
    if pos < len(text):
        out.append(("lit", text[pos:]))
    return _merge(out)


def brace_tokens(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    for m in _BRACE.finditer(text):
        if m.start() > pos:
            out.append(("lit", text[pos:m.start()]))
        g = m.group()
        out.append(("lit", g[0]) if g in ("{{", "}}") else ("ph", g))
        pos = m.end()
    if pos < len(text):
        out.append(("lit", text[pos:]))
    return _merge(out)


def literal_tokens(text: str) -> list[Token]:
    return [("lit", text)] if text else []


def _merge(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for kind, text in tokens:
        if out and out[-1][0] == kind == "lit":
            out[-1] = ("lit", out[-1][1] + text)
        elif text or kind == "ph":
            out.append((kind, text))
    return out


_WIDTH = re.compile(r"^%(?:\([^)]*\))?(?P<flags>[-#0 +']*)[1-9]")


def _ph_regex(ph: str) -> str:
    w = _WIDTH.match(ph) if ph.startswith("%") else None
    if w and "-" not in w.group("flags") and ph[-1] not in "sSvqTcp":
        # a field width pads a number with spaces on the left ("%10.2f" prints "    102.12");
        # "0" pads with zeros, which the number's own pattern takes
        return " *" + _ph_regex(ph[:w.end() - 1] + ph[w.end():].lstrip("0123456789"))
    if ph.startswith("%"):
        conv = ph[-1]
        if conv in "diu":
            return _INT
        if conv in "xXp":
            return r"\S+" if conv == "p" else _HEX
        if conv in "eEfFgG":
            return _FLOAT
        if conv == "c":
            return "."
        return _ANY
    spec = ph[1:-1].rpartition(":")[2] if ":" in ph else ""
    if spec and spec[-1] == "d":
        return _INT
    if spec and spec[-1] in "fFeEgG%":
        return _FLOAT
    return _ANY


def to_regex(tokens: list[Token]) -> str:
    parts = [re.escape(t) if k == "lit" else _ph_regex(t) for k, t in tokens]
    # unanchored: a wildcard at either end adds nothing but work
    while parts and parts[0] == _ANY:
        parts.pop(0)
    while parts and parts[-1] == _ANY:
        parts.pop()
    return "".join(parts)


def to_template(tokens: list[Token]) -> str:
    return "".join(t for _, t in tokens)


def render_sample(tokens: list[Token], value: str = "7") -> str:
    """The line the format string prints with every text field set to ``value`` (numeric,
    hex and character fields get ``7``, what they could print)."""
    return "".join(t if k == "lit" else value if _ph_regex(t) == _ANY else "7" for k, t in tokens)


def longest_literal(tokens: list[Token]) -> str:
    """The longest literal run, stripped: the substring a line must contain before its regex
    is worth running."""
    lits = [t.strip() for k, t in tokens if k == "lit"]
    return max(lits, key=len, default="")


def informative(tokens: list[Token], min_len: int = 8) -> bool:
    """A template worth matching: some literal run long enough to mean something on its own
    (``"%s: %s"`` or ``"Error: {}"`` would match every line)."""
    lit = longest_literal(tokens)
    return len(lit) >= min_len and sum(c.isalpha() for c in lit) >= 5


def first_line(tokens: list[Token], min_len: int = 8) -> list[Token] | None:
    """The first line of a multi-line template that is informative on its own: a log is read a
    line at a time, so the regex is built from one printed line. None when no line is."""
    lines: list[list[Token]] = [[]]
    for kind, text in tokens:
        if kind == "lit" and "\n" in text:
            pieces = text.split("\n")
            for i, piece in enumerate(pieces):
                if i:
                    lines.append([])
                if piece:
                    lines[-1].append(("lit", piece))
        else:
            lines[-1].append((kind, text))
    for line in lines:
        if informative(line, min_len):
            return line
    return None


def key_word(tokens: list[Token]) -> str:
    """The longest whole word of the literal text: a word a printed line must contain as a
    word (``\\w+`` token). Words glued to a placeholder (``%sfoo``) are not whole. "" if none."""
    text = "".join(t if k == "lit" else "\0" for k, t in tokens)
    best = ""
    for m in re.finditer(r"\w+", text):
        before = text[m.start() - 1] if m.start() else ""
        after = text[m.end()] if m.end() < len(text) else ""
        if "\0" in (before, after):
            continue
        if len(m.group()) > len(best):
            best = m.group()
    return best


TOKENIZERS = {"printf": percent_tokens, "brace": brace_tokens, "literal": literal_tokens}


def syntax_of(tokens: list[Token]) -> str:
    """Which grammar reads the template back into these tokens: "printf", "brace", "literal"
    (no fields), or "mixed" (an f-string with literal braces, a concatenation of styles)."""
    text = to_template(tokens)
    if all(k == "lit" for k, _ in tokens):
        return "literal"
    for name in ("printf", "brace"):
        if TOKENIZERS[name](text) == tokens:
            return name
    return "mixed"


def prefix(tokens: list[Token], min_letters: int = 20) -> list[Token]:
    """The head of a template that identifies it: whole tokens up to the first point where the
    literal text holds ``min_letters`` letters. Posted logs are often cut ("... found in 60
    seconds. This ty"), wrapped or shortened by the poster; the head is what survives."""
    out: list[Token] = []
    letters = 0
    for kind, text in tokens:
        out.append((kind, text))
        if kind == "lit":
            letters += sum(c.isalpha() for c in text)
            if letters >= min_letters and informative(out):
                break
    return out
