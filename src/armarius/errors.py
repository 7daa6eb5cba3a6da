"""Errors that Armarius reports to its callers.

Every refusal is an :class:`ArmariusError` with a stable machine-readable ``code``, a message
written for the reader (a model or a person: it says what to do next) and JSON ``details``.
Each surface maps them once: MCP to a tool result with ``isError``, HTTP to one JSON envelope
with a status, the CLI to stderr and a distinct exit code.

A next step that only an agent can take (an MCP tool to call) goes in ``agent_hint``, not in the
message: the agent surfaces append it, the human surfaces (CLI, web pages) word their own.

    ArmariusError
    ├── InvalidInput          invalid_input        the request does not have the required form
    │   └── ReasonRequired    reason_required      an override or confirmation without a reason
    ├── Unauthenticated       unauthenticated      no valid credential was presented
    ├── NotAllowed            not_allowed          the principal lacks the permission
    ├── NotFound              not_found            the named thing does not exist here
    ├── AlreadyExists         already_exists       a unique name is taken
    ├── Conflict              conflict             the state changed since the caller looked
    │   ├── ApprovalUsed      approval_used        the approval token was used already
    │   ├── OperationConflict operation_conflict   an operation id reused for another payload
    │   └── DraftExists       draft_exists         a draft with this slug exists (never overwritten)
    ├── ApprovalMissing       approval_missing     no usable approval token for this workspace
    ├── ApprovalExpired       approval_expired     the approval expired before it was used
    ├── ApprovalMismatch      approval_mismatch    the approval was given for other content
    ├── ConfigError           config_invalid       the settings file or environment is wrong
    ├── SchemaOutdated        schema_outdated      the database needs `armarius init`
    ├── StorageUnavailable    storage_unavailable  the database cannot be reached
    ├── ResearchUnavailable   research_unavailable a configured source failed or timed out
    ├── BudgetExhausted       budget_exhausted     the research session has no action budget left
    ├── SessionBlocked        session_blocked      the research session is blocked until a human resumes it
    ├── SessionClosed         session_closed       the research session is closed (readable, no more queries)
    ├── PortInUse             port_in_use          the server's port is taken by another program
    ├── TooManyAttempts       too_many_attempts    too many failed logins; wait before trying again
    ├── RequestTooLarge       request_too_large    an HTTP request body over the server's limit
    ├── RequestTimeout        request_timeout      an HTTP request body that did not arrive in time
    └── InternalError         internal             anything unexpected (details are logged only)

``judgment_required`` is not an error: it is a normal result that writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class ErrorCode:
    """How one error code is presented on every surface."""

    code: str
    http_status: int
    exit_code: int
    summary: str


#: Every code Armarius can return, with its HTTP status and CLI exit code.
#: docs/errors.md documents each one; a test keeps the two in step.
ERROR_CODES: dict[str, ErrorCode] = {}

#: Codes raised in this process (the test suite checks every code is exercised).
raised_codes: set[str] = set()


#: How many characters of a caller's value a message may repeat.
ECHO_LIMIT = 80


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """A caller's value, quoted for a message: every character that is not printable (controls,
    NUL, bidirectional and other format characters, line breaks) escaped, and cut after ``limit``
    characters. The one way a message repeats what a caller sent."""
    text = str(value)
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


def _register(code: str, http_status: int, exit_code: int, summary: str) -> str:
    ERROR_CODES[code] = ErrorCode(code, http_status, exit_code, summary)
    return code


class ArmariusError(Exception):
    """Base of every error with a stable code."""

    code: ClassVar[str] = _register("internal", 500, 70, "Something unexpected failed; it was logged.")

    def __init__(self, message: str, *, agent_hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        #: The next step in the agent tools' terms (e.g. "recall or list to find one").
        self.agent_hint = agent_hint
        self.details = details
        raised_codes.add(self.code)

    def to_dict(self, *, for_agent: bool = True) -> dict[str, Any]:
        """The error as every surface sends it; a human surface passes ``for_agent=False``."""
        message = f"{self.message} {self.agent_hint}" if for_agent and self.agent_hint else self.message
        return {"code": self.code, "message": message, "details": self.details}

    @property
    def http_status(self) -> int:
        return ERROR_CODES[self.code].http_status

    @property
    def exit_code(self) -> int:
        return ERROR_CODES[self.code].exit_code


class InternalError(ArmariusError):
    """An unexpected failure; the message is generic, the traceback goes to the log."""

    def __init__(self) -> None:
        super().__init__("An internal error occurred. It was logged; please report it.")


class InvalidInput(ArmariusError):
    code = _register("invalid_input", 400, 3, "The request does not have the required form.")


class ReasonRequired(InvalidInput):
    code = _register("reason_required", 400, 3, "An override or confirmation needs a non-blank reason.")


class Unauthenticated(ArmariusError):
    code = _register("unauthenticated", 401, 4, "No valid credential was presented.")


class NotAllowed(ArmariusError):
    code = _register("not_allowed", 403, 4, "The principal lacks the permission for this action.")


class NotFound(ArmariusError):
    code = _register("not_found", 404, 5, "The named thing does not exist in this workspace.")


class AlreadyExists(ArmariusError):
    code = _register("already_exists", 409, 6, "The name is taken.")


class Conflict(ArmariusError):
    code = _register("conflict", 409, 6, "The state changed since the caller last looked.")


class ConfigError(ArmariusError):
    code = _register("config_invalid", 500, 7, "The settings file or environment is wrong.")


class SchemaOutdated(ArmariusError):
    code = _register("schema_outdated", 503, 8, "The database schema needs `armarius init`.")


class StorageUnavailable(ArmariusError):
    code = _register("storage_unavailable", 503, 8, "The database cannot be reached.")


class ApprovalMissing(ArmariusError):
    code = _register("approval_missing", 403, 4, "No usable approval token was given for this workspace.")


class ApprovalExpired(ArmariusError):
    code = _register("approval_expired", 403, 4, "The approval token expired before it was used.")


class ApprovalMismatch(ArmariusError):
    code = _register("approval_mismatch", 403, 4, "The approval was given for other content.")


class ApprovalUsed(Conflict):
    code = _register("approval_used", 409, 6, "The approval token was used already.")


class OperationConflict(Conflict):
    code = _register("operation_conflict", 409, 6, "The operation id was used for another payload.")


class DraftExists(Conflict):
    code = _register("draft_exists", 409, 6, "A draft with this slug exists; drafts are never overwritten.")


class ResearchUnavailable(ArmariusError):
    code = _register("research_unavailable", 503, 8, "A configured research source failed or timed out.")


class BudgetExhausted(ArmariusError):
    code = _register("budget_exhausted", 409, 11, "The research session has no action budget left.")


class SessionBlocked(ArmariusError):
    code = _register("session_blocked", 423, 12, "The research session is blocked until a human resumes it.")


class SessionClosed(ArmariusError):
    code = _register("session_closed", 409, 13, "The research session is closed; it stays readable.")


class PortInUse(ArmariusError):
    code = _register("port_in_use", 503, 10, "The server's address and port are taken by another program.")


class TooManyAttempts(ArmariusError):
    code = _register("too_many_attempts", 429, 14, "Too many failed logins recently; wait before trying again.")


class RequestTooLarge(ArmariusError):
    code = _register("request_too_large", 413, 15, "The HTTP request body is larger than the server reads.")


class RequestTimeout(ArmariusError):
    code = _register("request_timeout", 408, 16, "The HTTP request body did not arrive in time.")
