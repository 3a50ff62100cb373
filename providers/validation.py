"""Validation of the frontends' request bodies: each problem answered as a 4xx naming the field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .models import TASK_NAME

MAX_PROMPT_CHARS = 32_000
MAX_SYSTEM_PROMPT_CHARS = 16_000
MAX_TOKENS_LIMIT = 32_768


@dataclass(frozen=True, slots=True)
class ApiError:
    status: int
    code: str
    message: str
    field: str | None = None

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


@dataclass(frozen=True, slots=True)
class CompleteBody:
    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True


FIELDS = {
    "prompt",
    "system_prompt",
    "max_tokens",
    "temperature",
    "priority",
    "task",
    "allow_cloud",
}


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(400, "invalid_field", message, field)


def parse_complete(raw: bytes) -> CompleteBody | ApiError:
    try:
        body = json.loads(raw)
    except UnicodeDecodeError:
        return ApiError(400, "invalid_json", "The body is not UTF-8 text.")
    except ValueError as exc:
        return ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}.")
    if not isinstance(body, dict):
        return ApiError(400, "invalid_json", "The body must be a JSON object.")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        return _invalid(unknown[0], f"Unknown field '{unknown[0]}'.")

    prompt = body.get("prompt")
    if prompt is None:
        return _invalid("prompt", "'prompt' is required.")
    if not isinstance(prompt, str):
        return _invalid("prompt", "'prompt' must be a string.")
    if not prompt.strip():
        return _invalid("prompt", "'prompt' cannot be blank.")
    if len(prompt) > MAX_PROMPT_CHARS:
        return _invalid("prompt", f"'prompt' may be at most {MAX_PROMPT_CHARS} characters.")

    system_prompt = body.get("system_prompt", "")
    if system_prompt is None:
        system_prompt = ""
    if not isinstance(system_prompt, str):
        return _invalid("system_prompt", "'system_prompt' must be a string.")
    if len(system_prompt) > MAX_SYSTEM_PROMPT_CHARS:
        return _invalid(
            "system_prompt",
            f"'system_prompt' may be at most {MAX_SYSTEM_PROMPT_CHARS} characters.",
        )

    max_tokens = body.get("max_tokens")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            return _invalid("max_tokens", "'max_tokens' must be an integer.")
        if not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
            return _invalid("max_tokens", f"'max_tokens' must be from 1 to {MAX_TOKENS_LIMIT}.")

    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            return _invalid("temperature", "'temperature' must be a number.")
        if not math.isfinite(temperature) or not 0 <= temperature <= 2:
            return _invalid("temperature", "'temperature' must be from 0 to 2.")
        temperature = float(temperature)

    priority = body.get("priority", "normal")
    if priority not in ("normal", "high"):
        return _invalid("priority", '\'priority\' must be "normal" or "high".')

    task = body.get("task", "")
    if task is None:
        task = ""
    if not isinstance(task, str):
        return _invalid("task", "'task' must be a string.")
    if task and not TASK_NAME.fullmatch(task):
        return _invalid(
            "task", "'task' is up to 100 letters, digits, '.', '_' and '-', starting alphanumeric."
        )

    allow_cloud = body.get("allow_cloud", True)
    if not isinstance(allow_cloud, bool):
        return _invalid("allow_cloud", "'allow_cloud' must be true or false.")

    return CompleteBody(
        prompt=prompt,
        system_prompt=system_prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        priority=priority,
        task=task,
        allow_cloud=allow_cloud,
    )
