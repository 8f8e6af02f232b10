"""Bounded decoding: every document read from a target, a remote host or a file given to us
has a byte cap, a cap on the objects it may build and on how deep they nest, checked before
(bytes, object count) and right after (depth) decoding, never by running out of memory or
stack.

Dense JSON is what makes memory explode: 100 MB of ``[1,1,1,...`` is 50 million Python
objects (2.6 GB). The count of ``[``, ``{`` and ``,`` bounds the number of values a JSON text
can build and is counted in C (``bytes.count``) before anything is built.

Layer: foundation; may import: the standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from hangdoctor.errors import InputError

# The defaults fit the largest real snapshots (64 processes x 200 threads with --native is
# 61 MB) with room, and keep the text, its decoded str and the objects of a hostile document
# within the CLI's 512 MiB (benchmarks/bench_hostile.py).
MAX_JSON_BYTES = 128 << 20
# What decoding may build, estimated from the text before decoding: a ``{`` is a dict (about
# 100 bytes once built), a ``[`` a list (about 60), a ``,`` one more value (a str or float of
# about 56 bytes, counted as one though a short int or a repeated key costs less).
MAX_JSON_COST = 320 << 20
COST_DICT, COST_LIST, COST_VALUE = 100, 60, 56
MAX_JSON_DEPTH = 64


class TooLarge(InputError):
    """A document past one of the caps: said in one line, exit code 2."""


def check_json_text(data: str | bytes, name: str, max_bytes: int = MAX_JSON_BYTES,
                    max_cost: int = MAX_JSON_COST) -> None:
    """Raise TooLarge when ``data`` is over the byte cap or would build too much."""
    size = len(data)
    if size > max_bytes:
        raise TooLarge(f"{name}: {size >> 20} MiB, over the {max_bytes >> 20} MiB cap; not read",
                       "give a smaller file (or the snapshot of fewer processes)")
    if isinstance(data, str):
        counts = data.count("{"), data.count("["), data.count(",")
    else:
        counts = data.count(b"{"), data.count(b"["), data.count(b",")
    cost = counts[0] * COST_DICT + counts[1] * COST_LIST + counts[2] * COST_VALUE
    if cost > max_cost:
        raise TooLarge(f"{name}: {counts[0] + counts[1] + counts[2]} JSON values would take "
                       f"about {cost >> 20} MiB once decoded, over the {max_cost >> 20} MiB cap; "
                       "not decoded", "a snapshot this dense is not one hangdoctor wrote")


def check_depth(value: Any, name: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise TooLarge when ``value`` nests deeper than ``max_depth`` (walked without recursion:
    every later reader of the document recurses, and would die of RecursionError)."""
    stack = [(value, 1)]
    while stack:
        cur, depth = stack.pop()
        if depth > max_depth:
            raise TooLarge(f"{name}: nested deeper than {max_depth} levels; not read",
                           "a snapshot is never nested this deep")
        if isinstance(cur, dict):
            stack.extend((v, depth + 1) for v in cur.values() if isinstance(v, (dict, list)))
        elif isinstance(cur, list):
            stack.extend((v, depth + 1) for v in cur if isinstance(v, (dict, list)))


def loads(data: str | bytes, name: str, max_bytes: int = MAX_JSON_BYTES,
          max_cost: int = MAX_JSON_COST, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` within the caps; ValueError for bad JSON, TooLarge past a cap."""
    check_json_text(data, name, max_bytes, max_cost)
    try:
        value = json.loads(data)
    except RecursionError:
        raise TooLarge(f"{name}: nested too deep to decode; not read",
                       "a snapshot is never nested this deep") from None
    check_depth(value, name, max_depth)
    return value


def raw_decode(decoder: json.JSONDecoder, text: str, name: str,
               max_cost: int = MAX_JSON_COST, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``decoder.raw_decode(text)`` within the caps (the text's own length was capped)."""
    check_json_text(text, name, max_bytes=len(text) + 1, max_cost=max_cost)
    try:
        value, _ = decoder.raw_decode(text)
    except RecursionError:
        raise TooLarge(f"{name}: nested too deep to decode", None) from None
    check_depth(value, name, max_depth)
    return value


def split_lines(buffer: bytearray, chunk: bytes, max_line: int) -> list[bytes]:
    """Complete lines from ``buffer`` + ``chunk`` (``buffer`` keeps the partial last line).

    A line of any length is tolerated: past ``max_line`` bytes its rest is dropped, never
    buffered (asyncio's readline raises at 64 KiB and loses the stream)."""
    out = []
    buffer.extend(chunk)
    while True:
        i = buffer.find(b"\n")
        if i < 0:
            break
        out.append(bytes(buffer[: min(i, max_line)]) + b"\n")
        del buffer[: i + 1]
    if len(buffer) > max_line:
        # a line still growing: keep its head, mark it cut, and drop what comes until its end
        head = bytes(buffer[:max_line])
        del buffer[:]
        buffer.extend(head)
    return out
