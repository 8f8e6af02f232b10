"""Errors that reach the user. Only hangdoctor.cli turns them into messages and exit codes.

Layer: foundation; may import: the standard library and hangdoctor.redact.
"""

from __future__ import annotations


class HangdoctorError(Exception):
    """A failure the user can act on: ``message`` says what went wrong, ``remedy`` what to do."""

    exit_code = 2

    def __init__(self, message: str, remedy: str | None = None) -> None:
        # an error line is a sink like any report: it often quotes the target's own stderr,
        # a command line or a host spec, so it is redacted where it is made
        from hangdoctor.redact import redact_text

        message = redact_text(str(message))
        remedy = redact_text(str(remedy)) if remedy is not None else None
        super().__init__(message)
        self.message = message
        self.remedy = remedy

    def one_line(self) -> str:
        return self.message + (f" ({self.remedy})" if self.remedy else "")


class UsageError(HangdoctorError):
    exit_code = 2


class TargetError(HangdoctorError):
    """The host could not be reached or refused us (unreachable, auth, host key, timeout)."""

    exit_code = 4


class InputError(HangdoctorError):
    """A file given to analyze/report could not be read or understood."""

    exit_code = 2
