"""The Responses API's `reasoning` setting: the effort becomes the request's `Thinking`, asked
of each provider whose model thinks in its own words; a summary asked for gives the model's
thinking back as a reasoning item's summary."""

from __future__ import annotations

from typing import Any

from edge.api.fields import JsonSchema, invalid
from gateway.adapters.messages import Thinking, thinking_of_effort

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed")
REASONING_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "properties": {
        "effort": {"type": ["string", "null"], "enum": [*EFFORTS, None]},
        "summary": {"type": ["string", "null"], "enum": [*SUMMARIES, None]},
        "generate_summary": {"type": ["string", "null"], "enum": [*SUMMARIES, None]},
    },
    "additionalProperties": False,
}


def parse_reasoning(value: Any, body: dict[str, Any]) -> Any:
    """(the request's Thinking, the setting as given back, whether a summary is wanted), or
    None when the caller sent none. A setting without an effort asks for the model's
    default thinking."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return invalid("reasoning", "'reasoning' must be an object.")
    unknown = set(value) - {"effort", "summary", "generate_summary"}
    if unknown:
        return invalid(f"reasoning.{min(unknown)}", "'reasoning' takes effort and summary.")
    effort = value.get("effort")
    if effort is not None and effort not in EFFORTS:
        return invalid("reasoning.effort", f"effort is one of {', '.join(EFFORTS)}.")
    for name in ("summary", "generate_summary"):
        if value.get(name) is not None and value[name] not in SUMMARIES:
            return invalid(f"reasoning.{name}", f"{name} is one of {', '.join(SUMMARIES)}.")
    summary = value.get("summary") or value.get("generate_summary")
    thinking = thinking_of_effort(effort) if effort else Thinking(on=True)
    given = {"effort": effort, "summary": summary}
    return thinking, given, summary is not None
