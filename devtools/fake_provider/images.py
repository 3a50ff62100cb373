"""Images in a chat request, read as each real API reads them, and the fake's description of
them.

- Anthropic: `image` blocks in a message's content, or in a `tool_result` block's content, with
  a source {"type": "base64", "media_type": "image/jpeg" | "image/png" | "image/gif" |
  "image/webp", "data": ...}, {"type": "url", "url": ...} or {"type": "file", "file_id": ...}.
  The bytes must be an image of the declared media type, as Anthropic checks.
- OpenAI: `image_url` content parts of user messages, {"url": "data:image/...;base64,..."} (the
  bytes must be a PNG, JPEG, GIF or WebP image) or an http(s) URL, taken as given.
- Ollama: a message's `images`, a list of base64 strings (only the base64 is checked, as Go's
  JSON decoding of Ollama's request does).

Malformed images are the provider's 400 in its own words, and so is an image to a model not in
`vision_models` (when that is set). The description (`describe`, see config's
`describe_images`) has one line per image, in the order they come: "image <n>: <byte count>
bytes sha256 <hex digest>" over the decoded bytes, "image <n>: url <url>" for a URL (and
"image <n>: file <file_id>" for Anthropic's Files API).

`png` makes a small real PNG for tests to send.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from devtools.fake_provider import dialects
from devtools.fake_provider.dialects import ANTHROPIC, OLLAMA, OPENAI, Reply, json_reply

MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
OLLAMA_NO_VISION = "this model is missing data required for image input"
_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?P<params>(?:;[^;,]*)*),(?P<data>.*)", re.DOTALL)
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


@dataclass(frozen=True, slots=True)
class ReceivedImage:
    """One image of a request: its bytes, or the URL (or file id) it was given by; where it
    came, as messages[message].content[part] (Ollama: messages[message].images[part])."""

    message: int
    part: int
    data: bytes | None = None
    url: str | None = None
    file_id: str | None = None

    def line(self, number: int) -> str:
        if self.data is not None:
            digest = hashlib.sha256(self.data).hexdigest()
            return f"image {number}: {len(self.data)} bytes sha256 {digest}"
        if self.url is not None:
            return f"image {number}: url {self.url}"
        return f"image {number}: file {self.file_id}"


def describe(images: tuple[ReceivedImage, ...]) -> str:
    return "\n".join(image.line(number) for number, image in enumerate(images, 1))


def read(dialect: str, request: dict[str, Any]) -> tuple[ReceivedImage, ...] | Reply:
    """The request's images in order, or the 400 its provider answers to a malformed one."""
    if dialect == ANTHROPIC:
        return _anthropic(request["messages"])
    if dialect == OLLAMA:
        return _ollama(request["messages"])
    return _openai(request["messages"])


def refusal(dialect: str, model: str, first: ReceivedImage) -> Reply:
    """The provider's 400 for an image sent to a model that takes none."""
    if dialect == OLLAMA:
        return json_reply(400, {"error": OLLAMA_NO_VISION})
    if dialect == ANTHROPIC:
        message = (
            f"messages.{first.message}.content.{first.part}: The model {model} does not "
            "support image input."
        )
        return dialects.error(ANTHROPIC, "bad_request", message=message)
    return dialects.error(
        OPENAI,
        "bad_request",
        message="Invalid content type. image_url is only supported by certain models.",
        param=f"messages.[{first.message}].content.[{first.part}].type",
    )


def sniff(data: bytes) -> str | None:
    """The media type the bytes' signature says, among MEDIA_TYPES; None for none."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def png(seed: int = 0, *, width: int = 1, height: int = 1) -> bytes:
    """A real PNG of width × height pixels in one colour drawn from `seed`: distinct seeds give
    distinct bytes."""
    colour = hashlib.sha256(str(seed).encode()).digest()[:3]
    rows = b"".join(b"\x00" + colour * width for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _decode(text: str) -> bytes | None:
    """Standard base64 (padded), as the providers take it; None when it isn't."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


# Anthropic ---------------------------------------------------------------------------------


def _anthropic(messages: list[Any]) -> tuple[ReceivedImage, ...] | Reply:
    found: list[ReceivedImage] = []
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for position, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            where = f"messages.{index}.content.{position}"
            inner = block.get("content") if block.get("type") == "tool_result" else None
            if block.get("type") == "image":
                nested = [(where, block)]
            elif isinstance(inner, list):
                nested = [
                    (f"{where}.tool_result.content.{number}", part)
                    for number, part in enumerate(inner)
                    if isinstance(part, dict) and part.get("type") == "image"
                ]
            else:
                continue
            for path, image in nested:
                seen = _anthropic_image(index, position, path, image.get("source"))
                if isinstance(seen, Reply):
                    return seen
                found.append(seen)
    return tuple(found)


def _anthropic_image(message: int, part: int, where: str, source: Any) -> ReceivedImage | Reply:
    def bad(message_text: str) -> Reply:
        return dialects.error(ANTHROPIC, "bad_request", message=message_text)

    if not isinstance(source, dict):
        return bad(f"{where}.image.source: Field required")
    kind = source.get("type")
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str):
            return bad(f"{where}.image.source.url.url: Field required")
        if not _is_http(url):
            return bad(f"{where}.image.source.url.url: Only HTTP and HTTPS URLs are supported")
        return ReceivedImage(message, part, url=url)
    if kind == "file":
        file_id = source.get("file_id")
        if not isinstance(file_id, str):
            return bad(f"{where}.image.source.file.file_id: Field required")
        return ReceivedImage(message, part, file_id=file_id)
    if kind != "base64":
        return bad(
            f"{where}.image.source: Input tag '{kind}' found using 'type' does not match any of "
            "the expected tags: 'base64', 'file', 'url'"
        )
    media_type, data = source.get("media_type"), source.get("data")
    if media_type not in MEDIA_TYPES:
        return bad(
            f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
            "'image/png', 'image/gif' or 'image/webp'"
        )
    if not isinstance(data, str):
        return bad(f"{where}.image.source.base64.data: Field required")
    raw = _decode(data)
    if raw is None:
        return bad(f"{where}.image.source.base64.data: Invalid base64 data")
    actual = sniff(raw)
    if actual is None:
        return bad(f"{where}.image.source.base64.data: Could not process image")
    if actual != media_type:
        return bad(
            f"{where}.image.source.base64.data: The image was specified using the {media_type} "
            f"media type, but the image appears to be a {actual} image"
        )
    return ReceivedImage(message, part, data=raw)


# OpenAI ------------------------------------------------------------------------------------


def _openai(messages: list[Any]) -> tuple[ReceivedImage, ...] | Reply:
    found: list[ReceivedImage] = []
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for position, part in enumerate(content if isinstance(content, list) else []):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            where = f"messages.[{index}].content.[{position}]"
            if message.get("role") != "user":
                return _openai_bad(
                    "Invalid value: 'image_url'. Supported values are: 'text'.", f"{where}.type"
                )
            seen = _openai_image(index, position, where, part.get("image_url"))
            if isinstance(seen, Reply):
                return seen
            found.append(seen)
    return tuple(found)


def _openai_bad(message: str, param: str) -> Reply:
    return dialects.error(OPENAI, "bad_request", message=message, param=param)


def _openai_image(message: int, part: int, where: str, image_url: Any) -> ReceivedImage | Reply:
    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        param = f"{where}.image_url.url"
        return _openai_bad(f"Missing required parameter: '{param}'.", param)
    if _is_http(url):
        return ReceivedImage(message, part, url=url)
    parsed = _DATA_URL.fullmatch(url)
    if parsed is None or ";base64" not in parsed["params"]:
        return _openai_bad(
            f"Invalid image URL: '{where}.image_url.url'. Expected a valid URL or a "
            "base64-encoded data URL with an image MIME type (e.g. "
            "'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU=').",
            f"{where}.image_url.url",
        )
    raw = _decode(parsed["data"])
    if not parsed["mime"].startswith("image/") or raw is None or sniff(raw) is None:
        return _openai_bad(
            "You uploaded an unsupported image. Please make sure your image has of one the "
            "following formats: ['png', 'jpeg', 'gif', 'webp'].",
            f"{where}.image_url.url",
        )
    return ReceivedImage(message, part, data=raw)


# Ollama ------------------------------------------------------------------------------------


def _ollama(messages: list[Any]) -> tuple[ReceivedImage, ...] | Reply:
    found: list[ReceivedImage] = []
    for index, message in enumerate(messages):
        listed = message.get("images") if isinstance(message, dict) else None
        if listed is None:
            continue
        if not isinstance(listed, list):
            return dialects.ollama_unmarshal_error(listed, "images", "[]api.ImageData")
        for position, image in enumerate(listed):
            if not isinstance(image, str):
                return dialects.ollama_unmarshal_error(image, "images", "api.ImageData")
            raw = _decode(image)
            if raw is None:
                offset = next(
                    (at for at, char in enumerate(image) if char not in _ALPHABET), len(image)
                )
                return json_reply(400, {"error": f"illegal base64 data at input byte {offset}"})
            found.append(ReceivedImage(index, position, data=raw))
    return tuple(found)
