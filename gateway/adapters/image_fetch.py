"""An image given by URL, fetched for a provider that takes only an image's bytes (Ollama): over
the outbound URL policy of its own (`IMAGE_FETCH_ALLOW`: public addresses only unless it says
otherwise, whatever the providers' policy allows), held to the size the same image could have
inline (the chat body limit) and to the call's time, no redirect to anywhere the policy
refuses, no cookies, proxies or keys, and only an image of a type a provider reads. A failure
is the provider's to pass over (the next provider may take the URL as it is), never the
request's 500."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, replace

import httpx

from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import IMAGE_MEDIA_TYPES, CompletionRequest, Image
from gateway.adapters.outbound import PolicyHTTPTransport
from gateway.engine.outbound import OutboundPolicy

MAX_REDIRECTS = 3
CHUNK = 64 * 1024


class ImageUnfetched(Exception):
    """Why an image could not be fetched, in the gateway's words (no URL, no body)."""


@dataclass(frozen=True, slots=True)
class ImageFetch:
    """The deployment's choices for fetching images (`IMAGE_FETCH_ALLOW`, the body limit)."""

    allow: tuple[str, ...] = ()  # "loopback" / "private": none by default
    max_bytes: int = 4 * 1024 * 1024  # BODY_LIMIT_CHAT_BYTES

    async def inlined(self, request: CompletionRequest, *, timeout: float) -> CompletionRequest:
        """`request` with each image given by URL fetched, within `timeout`; raises
        ImageUnfetched."""
        if not any(not image.data for turn in request.turns for image in turn.images):
            return request
        turns = []
        for turn in request.turns:
            images = [await self.inline(image, timeout=timeout) for image in turn.images]
            turns.append(replace(turn, images=tuple(images)) if turn.images else turn)
        return replace(request, turns=tuple(turns))

    async def inline(self, image: Image, *, timeout: float) -> Image:
        """`image` with its bytes, fetched from its URL within `timeout`; raises
        ImageUnfetched."""
        if image.data:
            return image
        transport = PolicyHTTPTransport(
            limits=httpx.Limits(max_connections=1), policy=OutboundPolicy.allowing(self.allow)
        )
        try:
            async with (
                asyncio.timeout(timeout),
                httpx.AsyncClient(
                    transport=transport,
                    trust_env=False,
                    follow_redirects=True,
                    max_redirects=MAX_REDIRECTS,
                    headers={"accept": ", ".join(IMAGE_MEDIA_TYPES)},
                ) as client,
                client.stream("GET", image.url) as response,
            ):
                return await _read(response, self.max_bytes)
        except TimeoutError:
            raise ImageUnfetched("no answer in time") from None
        except ProviderError as exc:  # the policy refused where it leads
            raise ImageUnfetched(exc.message) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ImageUnfetched(type(exc).__name__) from None


async def _read(response: httpx.Response, limit: int) -> Image:
    if response.status_code != 200:
        raise ImageUnfetched(f"HTTP {response.status_code}")
    media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type not in IMAGE_MEDIA_TYPES:
        raise ImageUnfetched(f"not an image a provider reads ({media_type or 'no type'})")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ImageUnfetched(f"larger than {limit} bytes")
    body = bytearray()
    async for chunk in response.aiter_bytes(CHUNK):
        body += chunk
        if len(body) > limit:
            raise ImageUnfetched(f"larger than {limit} bytes")
    return Image(media_type, base64.b64encode(bytes(body)).decode("ascii"))
