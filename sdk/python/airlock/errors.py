"""Typed exceptions for the airlock API's error codes.

The server answers every failure with ``{"error": {"code", "message",
"request_id"}}``; ``CODES`` maps each code of its one error table
(internal/errdefs) to one exception class here, so callers catch kinds,
never parse messages. A test checks this table against the server's.
"""

import builtins

__all__ = [
    "AirlockError", "InvalidArgumentError", "AuthenticationError", "NotFoundError",
    "PermissionDeniedError", "MethodNotAllowedError", "ConflictError", "TooLargeError",
    "RateLimitError", "QuotaExceededError", "SessionEndedError", "TimeoutError", "UnsupportedError",
    "UnavailableError", "SessionLostError", "MisdirectedError", "NodeUnavailableError", "AuditUnavailableError", "ServerError",
    "ConnectionError", "CODES", "error_for",
]


class AirlockError(Exception):
    """An error of the airlock server or of reaching it.

    ``code`` is the API's machine-readable code ("not_found", ...),
    ``status`` the HTTP status (0 when nothing was answered), ``request_id``
    names the request in the server's log.
    """

    def __init__(self, message, code="", status=0, request_id="", end_code="", retry_after=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.end_code = end_code
        self.retry_after = retry_after

    def __str__(self):
        s = self.message or self.code or "airlock error"
        if self.request_id:
            s += " (request %s)" % self.request_id
        return s


class InvalidArgumentError(AirlockError, ValueError):
    """400: the request was malformed or out of range (a limit above the server's maximum, a bad path...)."""


class AuthenticationError(AirlockError):
    """401: the server wants a token (AIRLOCK_TOKEN) and did not get the right one."""


class NotFoundError(AirlockError):
    """404: no such session, file or command."""


class PermissionDeniedError(AirlockError):
    """403: the sandbox user may not access the file."""


class MethodNotAllowedError(AirlockError):
    """405."""


class ConflictError(AirlockError):
    """409: the session is busy (one execution at a time)."""


class SessionPausedError(ConflictError):
    """409: the session is paused and was not created with ``auto_resume``; call ``resume()`` first."""


class PauseImageCorruptError(AirlockError):
    """422: a paused session's image failed its checks on resume; the server keeps it for its operator,
    and ``kill()`` discards it."""


class TooLargeError(AirlockError):
    """413: a body, file or workspace exceeds a configured size."""


class RateLimitError(AirlockError):
    """429: a capacity limit (sessions, concurrency, transfers) is reached.

    ``retry_after`` is the server's Retry-After in seconds, or None.
    """


class QuotaExceededError(RateLimitError):
    """429: the API key's tenant used up a quota for now (sessions, executions per minute, CPU per day);
    ``retry_after`` says when to come back."""


class SessionEndedError(AirlockError):
    """410: the session ended; ``end_code`` says why (out_of_memory, idle_timeout, deleted...)."""


class SessionLostError(SessionEndedError):
    """410 (a cluster): the server holding the session restarted since it was made; create a new session."""


class MisdirectedError(AirlockError):
    """421 (a cluster): the session's id names another server than the one that answered; call the router."""


class TimeoutError(AirlockError, builtins.TimeoutError):
    """504, or the HTTP request itself ran out of time."""


class UnsupportedError(AirlockError):
    """501: a feature this server or request does not support."""


class UnavailableError(AirlockError):
    """503: the host cannot build a sandbox with the configured protections (see `airlock doctor`)."""


class NodeUnavailableError(UnavailableError):
    """503 from the Kubernetes router: the server holding the session is gone (its pod or node); the session may be
    lost: retry later (``retry_after``) or create a new one."""


class AuditUnavailableError(UnavailableError):
    """503: the server cannot write its audit log (its data directory is full or read-only) and refuses work until it
    can; nothing was done: retry later (``retry_after``)."""


class BadGatewayError(AirlockError):
    """502: a program in the session, reached through one of its ports, is not listening there or did not answer
    valid HTTP (the message says which). A 502 without airlock's code (a proxy in front of the server) is a
    ServerError."""


class ServerError(AirlockError):
    """500: the server's own failure; its log has the detail under request_id."""


class ConnectionError(AirlockError, builtins.ConnectionError):
    """The server could not be reached (nothing was answered)."""


# CODES is the one table from the API's error codes to exceptions.
CODES = {
    "invalid_argument": InvalidArgumentError,
    "unauthorized": AuthenticationError,
    "not_found": NotFoundError,
    "permission_denied": PermissionDeniedError,
    "method_not_allowed": MethodNotAllowedError,
    "conflict": ConflictError,
    "too_large": TooLargeError,
    "quota_exceeded": QuotaExceededError,
    "limit_reached": RateLimitError,
    "session_ended": SessionEndedError,
    "timeout": TimeoutError,
    "unsupported": UnsupportedError,
    "unavailable": UnavailableError,
    "session_lost": SessionLostError,
    "misdirected": MisdirectedError,
    "node_unavailable": NodeUnavailableError,
    "audit_unavailable": AuditUnavailableError,
    "bad_gateway": BadGatewayError,
    "session_paused": SessionPausedError,
    "pause_image_corrupt": PauseImageCorruptError,
    "internal": ServerError,
}

# _STATUSES picks a class when a body carries no code (a proxy's page).
_STATUSES = {400: InvalidArgumentError, 401: AuthenticationError, 403: PermissionDeniedError,
             404: NotFoundError, 405: MethodNotAllowedError, 409: ConflictError, 410: SessionEndedError,
             421: MisdirectedError,
             413: TooLargeError, 429: RateLimitError, 501: UnsupportedError, 503: UnavailableError,
             504: TimeoutError}


def error_for(code, message, status=0, request_id="", end_code="", retry_after=None):
    """Returns the exception for an error code (AirlockError for one this SDK does not know)."""
    cls = CODES.get(code)
    if cls is None:
        cls = _STATUSES.get(status, ServerError if status >= 500 else AirlockError)
    return cls(message, code=code, status=status, request_id=request_id, end_code=end_code,
               retry_after=retry_after)
