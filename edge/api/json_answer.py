"""The API's JSON answers: what Django's `JsonResponse` sends (`application/json`, the types
`DjangoJSONEncoder` knows, written its way), encoded by orjson (`gateway.engine.codec`):
compact, and in UTF-8 rather than escaped to ASCII."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse

from gateway.engine import codec


class JsonAnswer(HttpResponse):
    def __init__(
        self, data: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(
            codec.dumps_with(data, DjangoJSONEncoder),
            content_type="application/json",
            status=status,
            headers=headers,
        )
