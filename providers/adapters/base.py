"""The adapter contract, the request and response types, and the one HTTP call site.

An adapter turns a `CompletionRequest` into one upstream call and back into a `Completion`, or
raises `ProviderError` with the failure classified by the error table. It never retries: the
router alone decides what happens after a failure.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import httpx

from ..snapshot import ProviderConfig
from .errors import ErrorClass, ProviderError, classify_status, parse_retry_after


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """What to ask: the question (`prompt`, the last user message), the system prompt, the
    conversation before the question as (role, text) turns, and the sampling parameters."""

    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    history: tuple[tuple[str, str], ...] = ()  # ("user" | "assistant", text), oldest first
    top_p: float | None = None
    stop: tuple[str, ...] = ()

    def messages(self, *, with_system: bool = True) -> list[dict[str, str]]:
        messages = (
            [{"role": "system", "content": self.system_prompt}]
            if self.system_prompt and with_system
            else []
        )
        messages += [{"role": role, "content": text} for role, text in self.history]
        messages.append({"role": "user", "content": self.prompt})
        return messages

    def all_text(self) -> str:
        return "\n".join((self.system_prompt, *(text for _, text in self.history), self.prompt))


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    provider: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    is_fallback: bool = False
    degradation_notice: str | None = None
    finish_reason: str = ""  # the provider's own word: stop, length, max_tokens, end_turn …


class HealthLevel(StrEnum):
    """How deep a health check goes, in order: each level is checked only once the one before
    has passed."""

    REACHABLE = "reachable"  # the model list answers (and, for a keyed API, takes the key)
    MODEL = "model"  # the configured model is in it
    INFERENCE = "inference"  # a one-token completion answers


@dataclass(frozen=True, slots=True)
class HealthResult:
    """One health check. `level` is the level that failed, or the deepest one that passed."""

    ok: bool
    latency_ms: float
    detail: str = ""
    error_class: ErrorClass | None = None
    level: HealthLevel | None = None


# The inference level's question: one token of answer is all it needs to see.
HEALTH_PROBE = CompletionRequest(prompt="Reply with one word: ok", max_tokens=1)


@dataclass(slots=True)
class AdapterMetrics:
    """What this process saw of one provider: cheap counters, no locks (one event loop)."""

    calls: int = 0
    successes: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    last_latency_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "successes": self.successes,
            "failures": dict(self.failures),
            "last_latency_ms": self.last_latency_ms,
        }


class ProviderAdapter(ABC):
    """One provider's dialect over one pooled HTTP client."""

    kind: ClassVar[str]

    def __init__(self, config: ProviderConfig, client: httpx.AsyncClient) -> None:
        self.config = config
        self.client = client
        self.metrics = AdapterMetrics()
        self._headers = self.headers()
        self._templates: dict[tuple[str, str], tuple[httpx.URL, httpx.Headers]] = {}

    @property
    def name(self) -> str:
        return self.config.name

    @abstractmethod
    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        """One upstream call; raises ProviderError on any failure."""

    @abstractmethod
    async def health_check(self, *, timeout: float, inference: bool = False) -> HealthResult:
        """Whether the provider answers and serves the configured model, and with `inference`
        whether it also answers a one-token completion; all within `timeout`."""

    @property
    def paid_inference(self) -> bool:
        """Whether a one-token completion costs money: a cloud provider's does."""
        return not self.config.is_local

    def model_problem(self, body: Any) -> str:
        """What is wrong with the model list `body` for the configured model ("" if nothing)."""
        return ""

    async def health_levels(self, path: str, *, timeout: float, inference: bool) -> HealthResult:
        """The levels in turn within `timeout` overall: `path` (the model list) answers,
        `model_problem` finds nothing in it, and with `inference` a one-token completion
        answers in the time left. Never raises a ProviderError: a failure is the result."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout

        def result(
            level: HealthLevel, detail: str = "", exc: ProviderError | None = None
        ) -> HealthResult:
            return HealthResult(
                ok=not detail,
                latency_ms=(loop.time() - started) * 1000,
                detail=detail,
                error_class=exc.error_class if exc is not None else None,
                level=level,
            )

        try:
            body, _ = await self.request_json("GET", path, timeout=timeout)
        except ProviderError as exc:
            return result(HealthLevel.REACHABLE, f"{path} failed: {_failure(exc)}", exc)
        problem = self.model_problem(body)
        if problem:
            return result(HealthLevel.MODEL, problem)
        if not inference:
            return result(HealthLevel.MODEL)
        try:
            # Whatever is left of the check's time, however little: too little is a timeout.
            await self.complete(HEALTH_PROBE, timeout=max(0.001, deadline - loop.time()))
        except ProviderError as exc:
            return result(HealthLevel.INFERENCE, f"inference failed: {_failure(exc)}", exc)
        return result(HealthLevel.INFERENCE)

    def headers(self) -> dict[str, str]:
        return {}

    async def request_json(
        self, method: str, path: str, *, timeout: float, payload: dict[str, Any] | None = None
    ) -> tuple[Any, float]:
        """The one HTTP call site: returns (decoded JSON body, latency in ms) or raises a
        classified ProviderError. `timeout` bounds the whole call, connect to last byte."""
        started = time.perf_counter()
        self.metrics.calls += 1
        with self._classified(f"no answer within {timeout:.2f} s"):
            async with asyncio.timeout(timeout):
                response = await self.client.send(
                    self._build(method, path, payload, timeout), follow_redirects=False
                )
            body = response.content
        latency_ms = (time.perf_counter() - started) * 1000
        self.metrics.last_latency_ms = latency_ms
        if response.status_code >= 400:
            raise self._status_error(response, body)
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise self._failed(ErrorClass.MALFORMED, "the body is not JSON") from exc
        return decoded, latency_ms

    @contextmanager
    def _classified(self, timeout_message: str) -> Iterator[None]:
        """Transport failures as the error table's classes."""
        try:
            yield
        except TimeoutError as exc:
            raise self._failed(ErrorClass.TIMEOUT, timeout_message) from exc
        except httpx.TimeoutException as exc:
            raise self._failed(ErrorClass.TIMEOUT, f"timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise self._failed(ErrorClass.REFUSED, f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:  # e.g. a body that doesn't decode as its encoding says
            raise self._failed(ErrorClass.MALFORMED, f"{type(exc).__name__}: {exc}") from exc

    def _status_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        message = self.error_message(body) or f"HTTP {response.status_code}"
        return self._failed(
            classify_status(response.status_code, message),
            message,
            status=response.status_code,
            retry_after_s=parse_retry_after(
                response.headers.get("retry-after"), now_epoch=time.time()
            ),
        )

    # Streaming ----------------------------------------------------------------------------

    # How the dialect frames a stream: server-sent events, or one JSON object a line (NDJSON).
    stream_framing: ClassVar[str] = "sse"

    @abstractmethod
    def stream_request(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        """The path and payload that ask for a streamed answer."""

    @abstractmethod
    def stream_event(self, event: Any, stream: CompletionStream) -> str:
        """One decoded event of the stream: returns its text ("" if none) and notes usage,
        the finish reason and the end on `stream`; raises ProviderError for an error event."""

    async def stream(
        self, request: CompletionRequest, *, timeout: float, first_token_timeout: float
    ) -> CompletionStream:
        """Open a streamed answer and wait for its first text. Any failure up to then
        (connect, status, nothing within `first_token_timeout`) raises ProviderError, so the
        router can still go to another provider; after it, `CompletionStream.rest()` raises.
        After the first text, `timeout` bounds each wait for the next piece, not the whole
        answer: a long answer that keeps coming is not cut."""
        path, payload = self.stream_request(request)
        loop = asyncio.get_running_loop()
        started = loop.time()
        first_deadline = started + min(timeout, first_token_timeout)
        self.metrics.calls += 1
        http_request = self._build("POST", path, payload, timeout)
        with self._classified(f"no first token within {first_deadline - started:.2f} s"):
            async with asyncio.timeout_at(first_deadline):
                response = await self.client.send(http_request, stream=True, follow_redirects=False)
        stream = CompletionStream(self, response, timeout, started)
        try:
            if response.status_code >= 400:
                with self._classified("no error body in time"):
                    async with asyncio.timeout_at(first_deadline):
                        body = await response.aread()
                raise self._status_error(response, body)
            while not stream.first:
                text = await stream.next_text(
                    first_deadline, f"no first token within {first_deadline - started:.2f} s"
                )
                if text is None:
                    raise self._failed(ErrorClass.MALFORMED, "the stream ended with no text")
                stream.first = text
        except BaseException:
            await stream.aclose()
            raise
        stream.first_token_s = loop.time() - started
        self.metrics.last_latency_ms = stream.first_token_s * 1000
        return stream

    def _build(
        self, method: str, path: str, payload: dict[str, Any] | None, timeout: float
    ) -> httpx.Request:
        """The request as `client.build_request` would make it, from a template made once per
        method and path: httpx otherwise re-parses the URL and re-merges the client's headers
        on every call, a measurable share of a proxied request (bench/)."""
        template = self._templates.get((method, path))
        if template is None:
            # Appended, not joined: a base URL with a path (a proxy's prefix) keeps it.
            url = httpx.URL(self.config.http_base_url + path)
            built = self.client.build_request(method, url, headers=self._headers)
            built.headers.pop("content-length", None)
            template = self._templates[(method, path)] = (url, built.headers)
        url, headers = template
        return httpx.Request(
            method,
            url,
            headers=headers,
            content=None if payload is None else json.dumps(payload).encode(),
            extensions={"timeout": httpx.Timeout(timeout).as_dict()},
        )

    def error_message(self, body: bytes) -> str:
        """The upstream's own words from an error body, in either common shape."""
        try:
            decoded = json.loads(body)
        except ValueError:
            return body[:300].decode("utf-8", "replace").strip()
        return self.error_text(decoded)

    def error_text(self, decoded: Any) -> str:
        """The message of a decoded error body or error event."""
        error = decoded.get("error") if isinstance(decoded, dict) else None
        if isinstance(error, dict):
            parts = [str(error.get(key)) for key in ("message", "code") if error.get(key)]
            return " ".join(parts)[:500]
        if isinstance(error, str):
            return error[:500]
        return ""

    def _failed(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> ProviderError:
        self.metrics.failures[error_class] += 1
        return ProviderError(error_class, message, status=status, retry_after_s=retry_after_s)

    def succeeded(self, completion: Completion) -> Completion:
        self.metrics.successes += 1
        return completion

    def malformed(self, what: str) -> ProviderError:
        return self._failed(ErrorClass.MALFORMED, f"unexpected answer: {what}")


class CompletionStream:
    """An answer arriving piece by piece, handed over once its first text is in (`first`).

    `rest()` yields the remaining text; a stream that breaks raises ProviderError from it.
    The adapter's `stream_event` fills in the usage and finish reason as events arrive.
    """

    def __init__(
        self, adapter: ProviderAdapter, response: httpx.Response, idle_s: float, started: float
    ) -> None:
        self.adapter = adapter
        self.provider = adapter.name
        self.first = ""
        self.parts: list[str] = []
        self.tokens_in = 0
        self.tokens_out = 0
        self.finish_reason = ""
        self.done = False
        self.started = started
        self.first_token_s = 0.0  # how long the first text took
        self._response = response
        self._lines = response.aiter_lines()
        self._idle_s = idle_s
        self._closed = False

    @property
    def text(self) -> str:
        return "".join(self.parts)

    async def next_text(self, deadline: float, timeout_message: str) -> str | None:
        """The next non-empty text, or None once the stream has ended properly."""
        adapter = self.adapter
        sse = adapter.stream_framing == "sse"
        while not self.done:
            with adapter._classified(timeout_message):
                async with asyncio.timeout_at(deadline):
                    try:
                        line = await anext(self._lines)
                    except StopAsyncIteration:
                        line = None
            if line is None:
                if self.finish_reason:  # ended without its end marker, but after the finish
                    self.done = True
                    break
                raise adapter._failed(ErrorClass.REFUSED, "the stream ended before its end")
            if sse:
                if not line.startswith("data:"):
                    continue  # event names, comments, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    self.done = True
                    break
            else:
                data = line.strip()
                if not data:
                    continue
            try:
                event = json.loads(data)
            except (ValueError, RecursionError):
                raise adapter.malformed("a stream event is not JSON") from None
            text = adapter.stream_event(event, self)
            if text:
                self.parts.append(text)
                return text
        return None

    async def rest(self) -> AsyncGenerator[str, None]:
        """The text after `first`, piece by piece, until the stream ends."""
        try:
            loop = asyncio.get_running_loop()
            while True:
                text = await self.next_text(
                    loop.time() + self._idle_s, f"no text for {self._idle_s:.2f} s mid-answer"
                )
                if text is None:
                    break
                yield text
            self.adapter.metrics.successes += 1
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._response.aclose()

    def completion(self, latency_ms: float) -> Completion:
        """The whole answer, once the stream is done (for the cache and the ledger)."""
        return Completion(
            text=self.text,
            provider=self.provider,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out or estimate_tokens(self.text),
            latency_ms=latency_ms,
            finish_reason=self.finish_reason,
        )


def _failure(exc: ProviderError) -> str:
    """A failure as a check's detail, its class first: "timeout (no answer within 5.00 s)"."""
    return f"{exc.error_class.value} ({exc.message})" if exc.message else exc.error_class.value


def estimate_tokens(text: str) -> int:
    """A provider-independent estimate (about four characters a token) for budgets."""
    return max(1, len(text) // 4)


# No real answer has more; a bigger count is nonsense that would not fit the ledger's column.
MAX_TOKEN_COUNT = 2**31 - 1


def token_count(value: object) -> int:
    """A token count from an upstream body, or 0 when it's missing or nonsense."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return 0
