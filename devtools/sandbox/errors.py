"""API errors of the sandbox, shaped like the Kubernetes API server's ``metav1.Status`` failures.

Every failure the store or the HTTP layer can report is an :class:`ApiError` subclass carrying the HTTP code,
the machine-readable ``reason`` and a human message naming the object and field at fault. The HTTP layer turns
them into ``kind: Status`` bodies with :meth:`ApiError.to_status`; in-process callers (the sandbox
controllers) catch the subclasses directly, e.g. ``except Conflict:`` to retry an optimistic-concurrency
write.

The messages follow the real server's wording where clients or people recognise it (``pods "x" not found``,
``Operation cannot be fulfilled on ...``), because tools such as ``kubectl`` print them verbatim.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failed API call: ``code`` (HTTP status), ``reason`` (``metav1.StatusReason``) and ``message``."""

    code: int = 500
    reason: str = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = self.details
        return status


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class Expired(ApiError):
    code = 410
    reason = "Expired"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


class TooManyRequests(ApiError):
    code = 429
    reason = "TooManyRequests"


class InternalError(ApiError):
    code = 500
    reason = "InternalError"


def object_details(plural: str, group: str, name: str | None) -> dict[str, Any]:
    """The ``details`` block the real server attaches to object-level errors."""
    details: dict[str, Any] = {"kind": plural}
    if group:
        details["group"] = group
    if name:
        details["name"] = name
    return details


def qualified(plural: str, group: str) -> str:
    """``pods`` or ``deployments.apps``: how the real server names a resource in messages."""
    return f"{plural}.{group}" if group else plural
