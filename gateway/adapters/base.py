"""The adapter contract and its one HTTP call site (the types it speaks are in `messages`).

An adapter turns a `CompletionRequest` into one upstream call and back into a `Completion`, or
raises `ProviderError` with the failure classified by the error table. It never retries: the
router alone decides what happens after a failure.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from gateway.adapters import health_levels, params, thinking
from gateway.adapters.errors import ErrorClass, ProviderError, classify_status, parse_retry_after
from gateway.adapters.failures import Failures
from gateway.adapters.image_fetch import ImageFetch
from gateway.adapters.messages import (
    Completion,
    CompletionRequest,
    HealthResult,
    Reasoning,
    prompt_needed,
    signed_by,
)
from gateway.adapters.stream import CompletionStream, StreamDecoder
from gateway.adapters.transport import Fetch, OpenStream
from gateway.engine import codec, tracing
from gateway.engine.config import ProviderConfig
from gateway.engine.scrub import scrub_cut

# The finish reasons of an answer cut at its token limit, in each dialect's words.
CUT_OFF = ("length", "max_tokens")


class Template:
    """A request's parts made once per method and path: httpx's URL and headers, and the
    same as text for `fetch`."""

    __slots__ = ("headers", "host", "pairs", "url", "url_text")

    def __init__(self, url: httpx.URL, headers: httpx.Headers) -> None:
        self.url = url
        self.headers = headers
        self.url_text = str(url)
        self.host = url.host
        self.pairs = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.raw)


class ProviderAdapter(ABC):
    """One provider's dialect over one pooled HTTP client."""

    kind: ClassVar[str]
    embeds: ClassVar[bool] = False  # the dialect has an embeddings endpoint (`embed`)

    def __init__(
        self,
        config: ProviderConfig,
        client: httpx.AsyncClient,
        image_fetch: ImageFetch | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.image_fetch = image_fetch  # how an image given by URL is fetched (None: it isn't)
        self.failures = Failures(config.secrets)
        self._headers = self.headers()
        self._templates: dict[tuple[str, str], Template] = {}
        # The client's ways to a whole answer and to a stream without httpx's client, where
        # it has them.
        self._fetch: Fetch | None = getattr(client, "fetch", None)
        self._open_stream: OpenStream | None = getattr(client, "open_stream", None)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def dialect(self) -> str:
        """The parameter table's column (`params`) it speaks: its kind's own, unless it speaks
        another kind's dialect (Azure OpenAI speaks OpenAI's)."""
        return self.kind

    @abstractmethod
    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        """One upstream call; raises ProviderError on any failure."""

    @abstractmethod
    async def health_check(self, *, timeout: float, inference: bool = False) -> HealthResult:
        """Whether the provider answers and serves the configured model, and with `inference`
        whether it also answers a one-token completion; all within `timeout`."""

    def cannot(self, request: CompletionRequest) -> tuple[str, str] | None:
        """Why this provider can't serve `request` as asked, as (the parameter, the reason);
        None when it can. The router skips it for the next one."""
        config = self.config
        if request.embed:
            if not self.embeds:
                return "model", f"a {self.kind} provider doesn't embed"
            if not config.embedding_models:
                return "model", "its settings name no embedding model"
            return None
        if request.uses_tools and not config.tools:
            return "tools", "its settings say it can't call tools"
        if request.output is not None and not config.json_output:
            return "response_format", "its settings say it can't give JSON output"
        if request.images and not config.images:
            return "images", "its settings say its model reads no images"
        return params.refusal(request.options, self.dialect)

    def dropped(self, request: CompletionRequest) -> tuple[str, ...]:
        """The request's fields this provider's call leaves out (it has no place for them), in
        the request's words: what the answer's X-Failover-Dropped header and the ledger name."""
        names = [*params.dropped(request.options, self.dialect)]
        names += thinking.left_out(request, self.config, self.dialect)
        return tuple(dict.fromkeys(names))

    async def prepared(self, request: CompletionRequest, *, timeout: float) -> CompletionRequest:
        """The request as this dialect can send it (Ollama's fetches the images given by URL,
        `ollama.py`)."""
        return request

    def own_signature(self) -> str:
        """What the answer's thinking is signed with, so a conversation brings it back to this
        dialect only (`messages.Thought`)."""
        return signed_by(self.dialect)

    def request_headers(self, request: CompletionRequest) -> tuple[tuple[str, str], ...]:
        """Headers this request's call carries beyond the provider's own."""
        return params.headers(request.options, self.dialect)

    def call_note(self, request: CompletionRequest) -> str:
        """What the ledger says of how this dialect asked for `request`, where it asked in
        words of its own ("" when it asked as the request did): its thinking, translated."""
        return thinking.note(request, self.config, self.dialect)

    async def embed(self, request: CompletionRequest, *, timeout: float) -> Completion:
        """One embedding call for `request.embed` (a Completion whose `embeddings` are the
        vectors, in order); raises ProviderError on any failure."""
        raise self.failures.failed(ErrorClass.UNSUPPORTED, f"a {self.kind} provider doesn't embed")

    def embedding_model(self, request: CompletionRequest) -> str:
        return request.model or self.config.embedding_models[0]

    def vectors(self, raw: Any, count: int) -> tuple[tuple[float, ...], ...]:
        """`count` vectors of numbers, all of one length, or a malformed answer."""
        if not isinstance(raw, list) or len(raw) != count:
            raise self.failures.malformed(f"not {count} embeddings")
        vectors = []
        for vector in raw:
            if (
                not isinstance(vector, list)
                or not vector
                or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector)
            ):
                raise self.failures.malformed("an embedding is not a list of numbers")
            vectors.append(tuple(float(x) for x in vector))
        if len({len(vector) for vector in vectors}) > 1:
            raise self.failures.malformed("embeddings of different lengths")
        return tuple(vectors)

    @property
    def paid_inference(self) -> bool:
        """Whether a one-token completion costs money: a cloud provider's does."""
        return not self.config.is_local

    def model_problem(self, body: Any) -> str:
        """What is wrong with the model list `body` for the configured model ("" if nothing)."""
        return ""

    async def model_loading(self, *, timeout: float) -> bool:
        """Whether the configured model is loading: its server answers within `timeout` and
        doesn't hold the model in memory yet. Only a self-hosted server can say; a cloud API
        never loads (False)."""
        return False

    async def health_levels(self, path: str, *, timeout: float, inference: bool) -> HealthResult:
        """The levels in turn within `timeout` overall (`health_levels.checked`)."""
        return await health_levels.checked(self, path, timeout=timeout, inference=inference)

    def headers(self) -> dict[str, str]:
        return {}

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        timeout: float,
        payload: dict[str, Any] | None = None,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> tuple[Any, float]:
        """The one HTTP call site: returns (decoded JSON body, latency in ms) or raises a
        classified ProviderError. `timeout` bounds the whole call, connect to last byte."""
        started = time.perf_counter()
        with self.failures.classified(f"no answer within {timeout:.2f} s"):
            if self._fetch is not None:
                template = self._template(method, path)
                content = None if payload is None else codec.dumps(payload)
                async with asyncio.timeout(timeout):
                    fetched = await self._fetch(
                        method,
                        template.url_text,
                        template.host,
                        _traced(template.pairs, extra),
                        content,
                        timeout,
                    )
                status, headers, body = fetched.status, fetched.headers, fetched.body
            else:
                async with asyncio.timeout(timeout):
                    response = await self.client.send(
                        self._build(method, path, payload, timeout, extra),
                        follow_redirects=False,
                    )
                status, headers, body = response.status_code, response.headers, response.content
        latency_ms = (time.perf_counter() - started) * 1000
        if status >= 400:
            raise self._status_error(status, headers, body)
        try:
            decoded = codec.loads(body)
        except (ValueError, RecursionError) as exc:
            raise self.failures.failed(ErrorClass.MALFORMED, "the body is not JSON") from exc
        return decoded, latency_ms

    def _status_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        message = self.error_message(body) or f"HTTP {status}"
        return self.failures.failed(
            classify_status(status, message),
            message,
            status=status,
            retry_after_s=parse_retry_after(headers.get("retry-after"), now_epoch=time.time()),
        )

    # Streaming ----------------------------------------------------------------------------

    @abstractmethod
    def stream_request(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        """The path and payload that ask for a streamed answer."""

    @abstractmethod
    def stream_decoder(self, request: CompletionRequest) -> StreamDecoder:
        """A fresh decoder for one streamed answer to `request`, in this dialect's words."""

    def stream_over(
        self, request: CompletionRequest, response: httpx.Response, idle_s: float, started: float
    ) -> CompletionStream:
        """The stream of `response`, read by this dialect's decoder."""
        return CompletionStream(
            self.name, self.stream_decoder(request), self.failures, response, idle_s, started
        )

    async def stream(
        self, request: CompletionRequest, *, timeout: float, first_token_timeout: float
    ) -> CompletionStream:
        """Open a streamed answer and wait for its first text. Any failure up to then
        (connect, status, nothing within `first_token_timeout`) raises ProviderError, so the
        router can still go to another provider; after it, `CompletionStream.rest()` raises.
        After the first text, `timeout` bounds each wait for the next piece, not the whole
        answer: a long answer that keeps coming is not cut."""
        request = await self.prepared(request, timeout=first_token_timeout)
        path, payload = self.stream_request(request)
        extra = self.request_headers(request)
        loop = asyncio.get_running_loop()
        started = loop.time()
        first_deadline = started + min(timeout, first_token_timeout)
        with self.failures.classified(f"no first token within {first_deadline - started:.2f} s"):
            async with asyncio.timeout_at(first_deadline):
                if self._open_stream is not None:
                    template = self._template("POST", path)
                    response = await self._open_stream(
                        "POST",
                        template.url_text,
                        template.host,
                        _traced(template.pairs, extra),
                        codec.dumps(payload),
                        timeout,
                    )
                else:
                    http_request = self._build("POST", path, payload, timeout, extra)
                    response = await self.client.send(
                        http_request, stream=True, follow_redirects=False
                    )
        stream = self.stream_over(request, response, timeout, started)
        stream.reasoning_signature = self.own_signature()
        try:
            if response.status_code >= 400:
                with self.failures.classified("no error body in time"):
                    async with asyncio.timeout_at(first_deadline):
                        body = await response.aread()
                raise self._status_error(response.status_code, response.headers, body)
            while not stream.first:
                piece = await stream.next_text(
                    first_deadline, f"no first token within {first_deadline - started:.2f} s"
                )
                if piece is None:
                    self.check_not_empty(request, stream.finish_reason)
                    break  # cut at its token limit before any text: an empty answer
                if isinstance(piece, Reasoning):  # thinking is not the answer's first token
                    stream.before.append(piece)
                    continue
                stream.first = piece
        except BaseException:
            await stream.aclose()
            raise
        stream.first_token_s = loop.time() - started
        return stream

    def _build(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None,
        timeout: float,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> httpx.Request:
        """The request as `client.build_request` would make it, from a template made once per
        method and path: httpx otherwise re-parses the URL and re-merges the client's headers
        on every call, a measurable share of a proxied request (bench/)."""
        template = self._template(method, path)
        headers = template.headers
        trace = tracing.upstream_headers()
        if trace or extra:
            headers = httpx.Headers(headers)
            headers.update(trace)
            headers.update(extra)
        return httpx.Request(
            method,
            template.url,
            headers=headers,
            content=None if payload is None else codec.dumps(payload),
            extensions={"timeout": httpx.Timeout(timeout).as_dict()},
        )

    def _template(self, method: str, path: str) -> Template:
        template = self._templates.get((method, path))
        if template is None:
            # Appended, not joined: a base URL with a path (a proxy's prefix) keeps it.
            url = httpx.URL(self.config.http_base_url + path)
            built = self.client.build_request(method, url, headers=self._headers)
            built.headers.pop("content-length", None)
            template = self._templates[(method, path)] = Template(url, built.headers)
        return template

    def error_message(self, body: bytes) -> str:
        """The upstream's own words from an error body, in either common shape."""
        try:
            decoded = json.loads(body)
        except ValueError:
            return self.upstream_text(body[:4096].decode("utf-8", "replace").strip(), 300)
        return self.error_text(decoded)

    def error_text(self, decoded: Any) -> str:
        """The message of a decoded error body or error event."""
        error = decoded.get("error") if isinstance(decoded, dict) else None
        if isinstance(error, dict):
            parts = [str(error.get(key)) for key in ("message", "code") if error.get(key)]
            return self.upstream_text(" ".join(parts), 500)
        if isinstance(error, str):
            return self.upstream_text(error, 500)
        return ""

    def upstream_text(self, text: str, limit: int) -> str:
        """An upstream's words, scrubbed, then cut to `limit`: cut first, a key across the cut
        would leave its first half, no longer the key the scrubber looks for."""
        return scrub_cut(text, limit, self.config.secrets)

    def check_not_empty(self, request: CompletionRequest, finish_reason: str) -> None:
        """An answer with no text and no tool call raises: malformed (a failure), unless the
        prompt alone fills half the provider's window or more. A server whose real context is
        smaller than its row says (llama.cpp's, say) answers an over-long prompt so: context
        too long, which goes on to a larger window and counts nothing against the breaker. An
        answer cut at its token limit may be empty (a reasoning model that spent it thinking):
        that is an answer."""
        if finish_reason in CUT_OFF:
            return
        needed = prompt_needed(request)
        if needed * 2 >= self.config.context_window:
            raise self.failures.failed(
                ErrorClass.CONTEXT_TOO_LONG,
                f"an empty answer to a prompt of about {needed} tokens "
                f"(window {self.config.context_window})",
            )
        raise self.failures.malformed("an empty answer")


def _traced(
    pairs: tuple[tuple[str, str], ...], extra: tuple[tuple[str, str], ...] = ()
) -> tuple[tuple[str, str], ...]:
    """A request's headers with its trace's (`traceparent`, and `tracestate` when the process
    carries a caller's on), when the process exports traces, and the request's own (`extra`)."""
    trace = tracing.upstream_headers()
    if not trace and not extra:
        return pairs
    return (*pairs, *trace, *extra)
