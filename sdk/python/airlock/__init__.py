"""airlock: run untrusted code in airlock sandboxes from Python.

Standard library only. The server's address and token come from
AIRLOCK_URL (http://127.0.0.1:8080 by default; unix:///path/airlock.sock
for the server's socket) and AIRLOCK_TOKEN, or from ``base_url=`` and
``token=``.

    from airlock import Sandbox

    with Sandbox.create() as sbx:
        sbx.run_code("x = 41")
        print(sbx.run_code("x + 1").text)   # 42

``airlock.langchain.as_tool`` makes a LangChain tool of a sandbox (it
imports langchain_core only when called).
"""

from .errors import (AirlockError, AuthenticationError, ConflictError, ConnectionError,
                     InvalidArgumentError, MethodNotAllowedError, NotFoundError, PermissionDeniedError,
                     QuotaExceededError, RateLimitError, ServerError, SessionEndedError, TimeoutError, TooLargeError,
                     UnavailableError, UnsupportedError, SessionLostError, MisdirectedError, NodeUnavailableError,
                     AuditUnavailableError, BadGatewayError,
                     SessionPausedError, PauseImageCorruptError)
from .models import (CodeContext, CommandResult, EntryInfo, Execution, ExecutionError, FileChange, Logs, OutputFile,
                     Result, RunResult, WriteInfo)
from .sandbox import CommandHandle, Commands, Files, Pty, Sandbox, run, run_program, templates
from .aio import AsyncSandbox

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "AsyncSandbox", "Files", "Commands", "CommandHandle", "Pty", "CodeContext", "run", "run_program", "templates",
    "Execution", "Result", "Logs", "ExecutionError", "FileChange", "OutputFile", "RunResult",
    "CommandResult", "EntryInfo", "WriteInfo",
    "AirlockError", "InvalidArgumentError", "AuthenticationError", "NotFoundError", "PermissionDeniedError",
    "MethodNotAllowedError", "ConflictError", "TooLargeError", "RateLimitError", "QuotaExceededError", "SessionEndedError",
    "TimeoutError", "UnsupportedError", "UnavailableError", "ServerError", "ConnectionError",
    "SessionLostError", "MisdirectedError", "NodeUnavailableError", "AuditUnavailableError",
    "BadGatewayError",
    "SessionPausedError", "PauseImageCorruptError",
]
