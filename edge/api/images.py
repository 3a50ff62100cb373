"""Images as every door takes them, read into the request's `Image`s: Anthropic's image blocks
(base64 with a media type, or a URL), OpenAI's `image_url` parts and the Responses API's
`input_image` (a data URL, or an http(s) URL). An image's bytes are checked to be base64 of an
image type a provider reads; a URL is carried as it is to a provider that fetches it, and a
provider that needs the bytes is passed over for it. The body limit bounds their size.

A part no door here serves (audio, a file) is refused by every door with one code,
`unsupported_content`, naming where it is.
"""

from __future__ import annotations

import binascii
import re
from typing import Any

from edge.api.json_body import ApiError
from gateway.adapters.messages import IMAGE_MEDIA_TYPES, Image

DATA_URL_START = "data:image/(png|jpeg|gif|webp);base64,"
DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)


IMAGE_URL: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": 2048, "pattern": "^https?://"},
        {"type": "string", "pattern": f"^{DATA_URL_START}"},
    ],
    "description": "A data URL (base64 of a PNG, JPEG, GIF or WebP image) or an http(s) URL.",
}


def unsupported_content(what: str, at: str) -> ApiError:
    """The refusal of content no provider here is given (`what`: "document blocks", "audio
    parts", "stored files")."""
    return ApiError(
        400, "unsupported_content", f"This gateway takes no {what}: only text and images.", at
    )


def _bad(at: str, message: str) -> ApiError:
    return ApiError(400, "invalid_image", message, at)


def inline(media_type: Any, data: Any, at: str) -> Image | ApiError:
    """An image given as base64 of `media_type`."""
    if media_type not in IMAGE_MEDIA_TYPES:
        return _bad(at, f"An image's type is one of {', '.join(IMAGE_MEDIA_TYPES)}.")
    if not isinstance(data, str) or not data:
        return _bad(at, "An image's data is its bytes in base64.")
    try:
        binascii.a2b_base64(data.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return _bad(at, "An image's data is not valid base64.")
    return Image(media_type, data)


def by_url(url: Any, at: str) -> Image | ApiError:
    """An image given as a URL: a data URL is its bytes; an http(s) URL is carried."""
    if not isinstance(url, str) or not url:
        return _bad(at, "An image's URL must be a string.")
    found = DATA_URL.fullmatch(url)
    if found is not None:
        return inline(found["type"], found["data"], at)
    if url.startswith(("https://", "http://")) and len(url) <= 2048:
        return Image(url=url)
    return _bad(at, "An image's URL is a data URL (base64) or an http(s) URL of 2048 at most.")


def anthropic_block(block: dict[str, Any], at: str) -> Image | ApiError:
    """An Anthropic image block's image."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        assert isinstance(source, dict)
        return inline(source.get("media_type"), source.get("data"), f"{at}.source")
    if kind == "url":
        assert isinstance(source, dict)
        image = by_url(source.get("url"), f"{at}.source.url")
        if isinstance(image, Image) and image.data:
            return _bad(f"{at}.source.url", "A url source's URL is http or https.")
        return image
    if kind == "file":
        return unsupported_content("stored files", f"{at}.source")
    return _bad(f"{at}.source", "An image's source is base64 (media_type, data) or a url.")


ANTHROPIC_IMAGE_BLOCK: dict[str, Any] = {
    "type": "object",
    "required": ["type", "source"],
    "properties": {
        "type": {"const": "image"},
        "source": {
            "anyOf": [
                {
                    "type": "object",
                    "required": ["type", "media_type", "data"],
                    "properties": {
                        "type": {"const": "base64"},
                        "media_type": {"enum": list(IMAGE_MEDIA_TYPES)},
                        "data": {"type": "string"},
                    },
                },
                {
                    "type": "object",
                    "required": ["type", "url"],
                    "properties": {"type": {"const": "url"}, "url": {"type": "string"}},
                },
            ]
        },
    },
}
