"""The Messages API's settings of how the model works rather than what it is told: `thinking`,
`output_config` (the effort, and the answer's JSON format) and `context_management`, each
read with Anthropic's rules and the JSON Schema that says the same.

`thinking` becomes the request's `Thinking` (on with a budget, adaptive, or off), which every
dialect is asked in its own words; `output_config.effort` sets its effort; a JSON Schema format
becomes the request's output format, as `response_format` does on the OpenAI doors.
`context_management` is carried to Anthropic as it is: no other dialect edits a conversation.
"""

from __future__ import annotations

from typing import Any

from edge.api.fields import JsonSchema, invalid
from edge.api.json_body import ApiError
from gateway.adapters.messages import OutputFormat, Thinking

# Anthropic's smallest thinking budget.
MIN_BUDGET = 1024
EFFORTS = ("low", "medium", "high", "max")

THINKING_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["type", "budget_tokens"],
            "properties": {
                "type": {"const": "enabled"},
                "budget_tokens": {"type": "integer", "minimum": MIN_BUDGET},
                "display": {"type": "string"},
            },
        },
        {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"enum": ["adaptive", "disabled"]}},
        },
    ]
}
OUTPUT_FORMAT_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "required": ["type", "schema"],
    "properties": {"type": {"const": "json_schema"}, "schema": {"type": "object"}},
}
OUTPUT_CONFIG_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "properties": {
        "effort": {"type": ["string", "null"], "enum": [*EFFORTS, None]},
        "format": OUTPUT_FORMAT_SCHEMA,
    },
}
CONTEXT_MANAGEMENT_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "properties": {"edits": {"type": "array", "items": {"type": "object"}}},
}


def parse_thinking(value: Any, body: dict[str, Any]) -> Any:
    """The request's `Thinking`, or None when the caller sent none."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "disabled":
        return Thinking(on=False)
    if kind == "adaptive":
        return Thinking(on=True, adaptive=True)
    if kind != "enabled":
        return invalid("thinking.type", "thinking's type is enabled, adaptive or disabled.")
    assert isinstance(value, dict)
    budget = value.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < MIN_BUDGET:
        return invalid(
            "thinking.budget_tokens", f"budget_tokens is an integer of at least {MIN_BUDGET}."
        )
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and budget >= max_tokens:
        return invalid("thinking.budget_tokens", "budget_tokens must be less than max_tokens.")
    return Thinking(on=True, budget=budget)


def parse_output_config(value: Any, body: dict[str, Any]) -> Any:
    """(the effort or "", the object to carry to Anthropic or None, the output format or
    None)."""
    if value is None:
        return "", None, None
    if not isinstance(value, dict):
        return invalid("output_config", "'output_config' must be an object.")
    effort = value.get("effort")
    if effort is not None and effort not in EFFORTS:
        return invalid("output_config.effort", "effort is low, medium, high or max.")
    output = _format(value.get("format"), "output_config.format")
    if isinstance(output, ApiError):
        return output
    carried = {key: item for key, item in value.items() if key != "format"}
    return effort or "", carried or None, output


def parse_output_format(value: Any, body: dict[str, Any]) -> Any:
    """The answer's JSON format (the beta's `output_format`, as `output_config.format`)."""
    return _format(value, "output_format")


def _format(form: Any, at: str) -> OutputFormat | ApiError | None:
    if form is None:
        return None
    if (
        not isinstance(form, dict)
        or form.get("type") != "json_schema"
        or not isinstance(form.get("schema"), dict)
    ):
        return invalid(
            at, 'The format is {"type": "json_schema", "schema": {...}} with a JSON Schema.'
        )
    return OutputFormat("json_schema", name="answer", schema=form["schema"])


def parse_context_management(value: Any, body: dict[str, Any]) -> Any:
    if value is None:
        return None
    edits = value.get("edits") if isinstance(value, dict) else None
    if not isinstance(value, dict) or (edits is not None and not isinstance(edits, list)):
        return invalid(
            "context_management", "'context_management' is an object with a list of edits."
        )
    return value
