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
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from ..snapshot import ProviderConfig
from .errors import ErrorClass, ProviderError, classify_status, parse_retry_after


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None

    def messages(self) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": self.prompt})
        return messages


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    provider: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    is_fallback: bool = False
    degradation_notice: str | None = None


@dataclass(frozen=True, slots=True)
class HealthResult:
    ok: bool
    latency_ms: float
    detail: str = ""
    error_class: ErrorClass | None = None


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
    async def health_check(self, *, timeout: float) -> HealthResult:
        """Whether the provider answers and serves the configured model."""

    def headers(self) -> dict[str, str]:
        return {}

    async def request_json(
        self, method: str, path: str, *, timeout: float, payload: dict[str, Any] | None = None
    ) -> tuple[Any, float]:
        """The one HTTP call site: returns (decoded JSON body, latency in ms) or raises a
        classified ProviderError. `timeout` bounds the whole call, connect to last byte."""
        started = time.perf_counter()
        self.metrics.calls += 1
        try:
            async with asyncio.timeout(timeout):
                response = await self.client.send(
                    self._build(method, path, payload, timeout), follow_redirects=False
                )
            body = response.content
        except TimeoutError as exc:
            raise self._failed(ErrorClass.TIMEOUT, f"no answer within {timeout:.2f} s") from exc
        except httpx.TimeoutException as exc:
            raise self._failed(ErrorClass.TIMEOUT, f"timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise self._failed(ErrorClass.REFUSED, f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:  # e.g. a body that doesn't decode as its encoding says
            raise self._failed(ErrorClass.MALFORMED, f"{type(exc).__name__}: {exc}") from exc
        latency_ms = (time.perf_counter() - started) * 1000
        self.metrics.last_latency_ms = latency_ms
        if response.status_code >= 400:
            message = self.error_message(body) or f"HTTP {response.status_code}"
            raise self._failed(
                classify_status(response.status_code, message),
                message,
                status=response.status_code,
                retry_after_s=parse_retry_after(
                    response.headers.get("retry-after"), now_epoch=time.time()
                ),
            )
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise self._failed(ErrorClass.MALFORMED, "the body is not JSON") from exc
        return decoded, latency_ms

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
