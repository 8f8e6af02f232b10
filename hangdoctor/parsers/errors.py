"""The one error the parsers raise on purpose: the project's user-facing InputError (message +
remedy, exit code 2), re-exported so parser code and the CLI catch the same class."""

from __future__ import annotations

from hangdoctor.errors import InputError

__all__ = ["InputError"]
