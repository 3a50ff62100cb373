"""Whether an answer does what its request required: a tool call where the request forced one,
calls only to the tools it offered (with arguments that are JSON, and that match the schema of
a strict tool), JSON text where it asked for JSON, and text matching a strict `json_schema`.

An answer that doesn't is `non_compliant` (the error table): the attempt is recorded so and the
request goes on to the next provider, as for any other failed call; whether it also counts
against the provider's breaker is the policy's `non_compliant_is_failure`. A whole answer is
checked in full. A stream is checked on its first piece, before anything is relayed: text where
a tool call was forced, a call to a tool not offered, text that can't begin the JSON asked for.
What only its end can show (JSON that doesn't parse, or misses the schema) is relayed as it
comes, since its first bytes are the client's already.

An answer cut at its token limit is the caller's `max_tokens`, not the model's failing: it is
not checked.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gateway.adapters.base import CUT_OFF
from gateway.adapters.messages import Completion, CompletionRequest, Piece, ToolCallDelta

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

# Where a request names no tool in particular.
UNFORCED = ("", "auto", "none")
# What JSON text may begin with (after whitespace): an object for JSON mode, any value for a
# schema.
_JSON_STARTS = tuple('{["-0123456789tfn')
_NOT_JSON = object()


def answer_problem(request: CompletionRequest, completion: Completion) -> str:
    """What a whole answer fails to do that `request` required ("" when nothing)."""
    if request.embed or completion.finish_reason in CUT_OFF:
        return ""
    offered = {tool.name: tool for tool in request.tools}
    for call in completion.tool_calls:
        problem = _call_problem(request, call.name)
        if problem:
            return problem
        arguments = _parsed(call.arguments or "{}")
        if not isinstance(arguments, dict):
            return f"the arguments of its call to '{call.name}' are not a JSON object"
        tool = offered[call.name]
        if tool.strict and tool.parameters:
            problem = _schema_problem(tool.parameters, arguments)
            if problem:
                return (
                    f"the arguments of its call to '{call.name}' miss the tool's schema: {problem}"
                )
    if completion.tool_calls:
        return ""
    if _forced(request):
        return f"no tool call, where tool_choice required {_forced_what(request)}"
    output = request.output
    if output is None:
        return ""
    value = _parsed(completion.text)
    if value is _NOT_JSON:
        return f"text that is not JSON, where response_format asked for {output.kind}"
    if output.kind == "json_object" and not isinstance(value, dict):
        return "JSON that is not an object, where response_format asked for json_object"
    if output.kind == "json_schema" and output.strict and output.schema:
        problem = _schema_problem(output.schema, value)
        if problem:
            return f"JSON that misses the strict schema '{output.name}': {problem}"
    return ""


def first_piece_problem(request: CompletionRequest, piece: Piece) -> str:
    """What a stream's first piece already shows it fails to do ("" when nothing, or when
    only the rest could tell)."""
    if isinstance(piece, ToolCallDelta):
        return _call_problem(request, piece.name) if piece.name else ""
    if not isinstance(piece, str) or not piece.strip():
        return ""
    if _forced(request):
        return f"text, where tool_choice required {_forced_what(request)}"
    output = request.output
    if output is None:
        return ""
    start = piece.lstrip()
    if output.kind == "json_object" and not start.startswith("{"):
        return "text that can't begin a JSON object, where response_format asked for json_object"
    if not start.startswith(_JSON_STARTS):
        return f"text that can't begin JSON, where response_format asked for {output.kind}"
    return ""


def _forced(request: CompletionRequest) -> bool:
    return bool(request.tools) and request.tool_choice not in UNFORCED


def _forced_what(request: CompletionRequest) -> str:
    choice = request.tool_choice
    return "a tool call" if choice == "required" else f"a call to '{choice}'"


def _call_problem(request: CompletionRequest, name: str) -> str:
    """What is wrong with a call to the tool `name` ("" when nothing)."""
    if name not in {tool.name for tool in request.tools}:
        return f"a call to '{name}', a tool the request didn't offer"
    choice = request.tool_choice
    if choice == "none":
        return f"a call to '{name}', where tool_choice was none"
    if choice not in (*UNFORCED, "required") and name != choice:
        return f"a call to '{name}', where tool_choice required '{choice}'"
    return ""


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _schema_problem(schema: dict[str, Any], value: Any) -> str:
    """Why `value` doesn't match `schema` ("" when it does, or when the schema can't be
    checked here: the provider took it, so it is not the answer's fault)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:
        return ""
    try:
        error = next(iter(validator.iter_errors(value)), None)
    except Exception:  # a reference that can't be resolved here, say
        return ""
    if error is None:
        return ""
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where or 'the top level'}: {error.message}"[:300]


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Draft202012Validator | None:
    """One validator a schema (by its text): a client sends the same schema request after
    request."""
    # Imported on the first strict schema, not with the router: jsonschema takes a seventh of
    # a second to import, a cold start's share for what most processes never need.
    from jsonschema import Draft202012Validator, exceptions

    schema = json.loads(schema_text)
    try:
        Draft202012Validator.check_schema(schema)
    except exceptions.SchemaError:
        return None
    return Draft202012Validator(schema)
