"""The one error the parsers raise on purpose."""

from __future__ import annotations


class InputError(Exception):
    """An input cannot be read at all (missing, a directory, unreadable); the message says what
    went wrong and what to do. Malformed *content* never raises: it is parsed as far as it goes."""
