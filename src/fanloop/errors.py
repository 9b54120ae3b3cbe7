"""The fanloop error tree.

Every error fanloop raises derives from :class:`FanloopError`. Each takes its message as the
first positional argument; context (status code, request id, retry delay...) is keyword-only
with defaults, so tests and custom providers can raise ``RateLimited("slow down",
retry_after=0.1)``.

::

    FanloopError
     ├── ConfigurationError          bad agent/provider configuration (also a ValueError)
     ├── ToolError                   raised by a tool: becomes an error result the model sees
     ├── ModelRetry                  raised by a tool or an output validator: "try again, because"
     ├── ApprovalError               resume() answers that do not match the pending approvals
     │    └── ApprovalConflict       another resume is answering them, or already has
     ├── RunIncomplete               RunResult.raise_if_incomplete(): the run did not complete
     ├── RequestInvalid              a browser request (fanloop.ui) that is malformed or over a cap
     ├── ProviderError               a model call failed        .transient says "retry me"
     │    ├── RateLimited            429                        transient
     │    ├── Overloaded             529, "overloaded_error"    transient
     │    ├── ServerError            5xx                        transient
     │    ├── Conflict               409                        transient
     │    ├── ProviderTimeout        408, read/connect timeouts transient
     │    ├── ProviderConnectionError dropped or refused connection, transport error mid-stream
     │    │                                                     transient
     │    ├── ResponseInvalid        empty turn, malformed payload               transient
     │    │    ├── StreamIncomplete  a stream that ended without its end marker  transient
     │    │    └── ResponseTooLarge  a response, frame or block count over its cap permanent
     │    ├── AuthenticationError    401/403                    permanent
     │    └── BadRequest             400/404/413/422            permanent
     │         └── ContextWindowExceeded  the prompt does not fit the model's window
     └── ScriptExhausted             a ScriptedProvider ran out of scripted turns

Provider errors that survive their retries leave ``Agent.run`` with the partial result of the
run attached as ``error.partial`` (a :class:`~fanloop.RunResult`), so nothing already done is
lost. Cancellation is not an error: the native cancellation exception propagates, carrying the
same ``partial`` attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ._result import RunResult

__all__ = [
    "ApprovalConflict",
    "ApprovalError",
    "AuthenticationError",
    "BadRequest",
    "ConfigurationError",
    "Conflict",
    "ContextWindowExceeded",
    "FanloopError",
    "ModelRetry",
    "Overloaded",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "RequestInvalid",
    "ResponseInvalid",
    "ResponseTooLarge",
    "RunIncomplete",
    "ScriptExhausted",
    "ServerError",
    "StreamIncomplete",
    "ToolError",
    "error_for_status",
]


class FanloopError(Exception):
    """Base class of every error fanloop raises."""

    def __init__(self, message: str = "", /) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigurationError(FanloopError, ValueError):
    """The agent, a tool or a provider was configured with values that cannot work."""


class ToolError(FanloopError):
    """Raise from a tool to hand the model an error result with exactly this message."""


class ModelRetry(FanloopError):
    """Raise from a tool or an output validator to send ``message`` back to the model, so it
    tries again (``ModelRetry("the total must be positive")``). From a tool it becomes that
    call's error result; from an output validator it counts against ``output_retries``."""


class RunIncomplete(FanloopError):
    """A run ended some other way than ``completed`` (raised by
    :meth:`RunResult.raise_if_incomplete <fanloop.RunResult.raise_if_incomplete>`).

    Attributes:
        result: the run's :class:`~fanloop.RunResult`: nothing it did is lost.
        termination_reason: how it ended.
    """

    def __init__(self, message: str = "", /, *, result: Any = None) -> None:
        super().__init__(message)
        self.result = result
        self.termination_reason = getattr(result, "termination_reason", None)


class RequestInvalid(FanloopError, ValueError):
    """A request from a browser client (:mod:`fanloop.ui`) that cannot be run: malformed,
    over one of its caps, or asking for something the session cannot do. Nothing ran.

    Attributes:
        code: a short machine-readable name, e.g. ``"bad_json"``, ``"too_large"``.
    """

    def __init__(self, message: str = "", /, *, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


class ApprovalError(FanloopError, ValueError):
    """Approvals that do not match what a session waits for (an unknown call id, a pending call
    left unanswered), or a new turn started while calls wait for approval. Nothing changed."""


class ApprovalConflict(ApprovalError):
    """Another resume got to these approvals first. Nothing changed.

    Two resumes of one parked batch (a double-clicked "Approve", two queue workers) race for
    it; exactly one runs the batch and every other one gets this error: while the winner is
    still running the batch (``answered`` is false), or after it has finished (``answered``
    is true; ``answers`` are the answers it ran with, and the session holds the results).

    Attributes:
        session_id: the session's id.
        call_ids: the pending call ids the answers were for.
        answered: whether the batch has already been run to its end.
        answers: the winner's answers by call id, once ``answered``; else empty.
    """

    def __init__(
        self,
        message: str = "",
        /,
        *,
        session_id: str = "",
        call_ids: tuple[str, ...] = (),
        answered: bool = False,
        answers: dict[str, bool | str] | None = None,
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.call_ids = tuple(call_ids)
        self.answered = answered
        self.answers = dict(answers or {})


class ScriptExhausted(FanloopError):
    """A :class:`~fanloop.testing.ScriptedProvider` was asked for more turns than it holds."""


class ProviderError(FanloopError):
    """A model call failed.

    Attributes:
        transient: ``True`` when retrying the same request may succeed (class-level default,
            overridable per instance).
        status_code: the HTTP status, when there was one.
        request_id: the provider's request id, when it sent one.
        retry_after: seconds the provider asked us to wait before retrying, if it said.
        provider: the provider's ``name``.
        attempts: how many attempts were made before this error left the retry loop.
        partial: the partial :class:`~fanloop.RunResult` of the run this error ended.
    """

    transient: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        /,
        *,
        status_code: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        body: Any = None,
        transient: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.request_id = request_id
        self.retry_after = retry_after
        self.provider = provider
        self.body = body
        self.attempts = 0
        self.partial: RunResult | None = None
        if transient is not None:
            self.transient = transient  # type: ignore[misc]

    def __str__(self) -> str:
        details = []
        if self.status_code is not None:
            details.append(f"status {self.status_code}")
        if self.request_id:
            details.append(f"request {self.request_id}")
        return f"{self.message} ({', '.join(details)})" if details else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status_code={self.status_code!r})"


class RateLimited(ProviderError):
    """The provider rejected the request for rate (HTTP 429)."""

    transient = True


class Overloaded(ProviderError):
    """The provider is overloaded (HTTP 529 or an in-stream ``overloaded_error``)."""

    transient = True


class ServerError(ProviderError):
    """The provider failed on its side (HTTP 5xx)."""

    transient = True


class Conflict(ProviderError):
    """The provider reported a conflicting concurrent request (HTTP 409)."""

    transient = True


class ProviderTimeout(ProviderError):
    """The request or the stream timed out (HTTP 408 or a client-side timeout)."""

    transient = True


class ProviderConnectionError(ProviderError):
    """The connection could not be made or was dropped mid-response."""

    transient = True


class ResponseInvalid(ProviderError):
    """The provider answered with something fanloop cannot use (e.g. an empty turn)."""

    transient = True


class StreamIncomplete(ResponseInvalid):
    """The response stream ended before its end marker."""


class ResponseTooLarge(ResponseInvalid):
    """A response, stream frame or count of content blocks over its cap.

    Not transient: the same request would very likely fetch the same oversized answer again.
    """

    transient = False


class AuthenticationError(ProviderError):
    """The credentials were missing, wrong, or lack permission (HTTP 401/403)."""


class BadRequest(ProviderError):
    """The provider rejected the request as malformed (HTTP 400/404/413/422)."""


class ContextWindowExceeded(BadRequest):
    """The prompt does not fit the model's context window."""


_STATUS: dict[int, type[ProviderError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: AuthenticationError,
    404: BadRequest,
    408: ProviderTimeout,
    409: Conflict,
    413: BadRequest,
    422: BadRequest,
    429: RateLimited,
    529: Overloaded,
}


def error_for_status(status_code: int) -> type[ProviderError]:
    """Return the error class that an HTTP status maps to.

    Example:
        >>> error_for_status(429).__name__
        'RateLimited'
    """
    cls = _STATUS.get(status_code)
    if cls is not None:
        return cls
    if status_code >= 500:
        return ServerError
    return ProviderError
