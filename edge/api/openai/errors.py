"""OpenAI's error shape on its doors: a refusal and an unexpected failure
(`openai_json_errors`), each answered as OpenAI answers it (a path no door serves:
`edge.handlers.not_found`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from edge.api.arrival import Arrival, json_errors
from edge.api.arrival import arrived as arrive
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.openai.shapes import error_body


def openai_error(error: ApiError) -> JsonAnswer:
    return JsonAnswer(error_body(error), status=error.status)


openai_json_errors = functools.partial(json_errors, render=openai_error)


async def arrived(
    request: HttpRequest, parse: Callable[[bytes], Any]
) -> Arrival | HttpResponseBase:
    """A POST's checks in their order (`edge.api.arrival.arrived`), refused in OpenAI's
    error shape."""
    return await arrive(request, parse, openai_error)
