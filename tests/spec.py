"""The published API references as test oracles: OpenAI's OpenAPI document (its JSON Schemas,
validated with `jsonschema`) and Ollama's API reference (the request fields each endpoint
documents).

The references live beside the project, in `../shared/reference`; a test that needs one skips
with a message naming the file when it is absent (a user's own clone), and CI, which has it,
runs the test.

OpenAI's document is OpenAPI 3.1, whose schemas are JSON Schema 2020-12, and is validated as
such, with one adaptation: some of its schemas still carry OpenAPI 3.0's `nullable: true`,
which 2020-12 does not know (it would be ignored, and a `null` refused by the schema's `type`).
Among them are fields the gateway sends as `null` on purpose, as OpenAI does: a stream chunk's
`finish_reason`, `logprobs` and `usage`. Each schema marked `nullable: true` (and only those) is
read as the document means it, "this schema, or null": `{"anyOf": [<schema>, {"type":
"null"}]}`. Nothing else is loosened. The other OpenAPI-only keywords need nothing:
`discriminator` and the `x-*` extensions are annotations to a 2020-12 validator (the `oneOf`
beside a `discriminator` still tells its branches apart, by each branch's own `type` enum),
and the 3.0 leftovers `exclusiveMinimum: true` and `$recursiveRef` sit in request schemas
(fine-tuning, file-search filters) that no answer of the gateway uses. Format checks are off
(`format` is an annotation in 2020-12, and OpenAI's `unixtime` is no format a validator knows).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
OPENAI_DOCUMENT = "openai-openapi.json"
OPENAI_URI = "urn:openai"


def require_reference(name: str) -> Path:
    """The path of a file in the reference folder; the test skips, naming it, when absent."""
    path = REFERENCE / name
    if not path.is_file():
        pytest.skip(f"the API reference {path} is absent (CI has it): the check can't run here")
    return path


def _nullable_as_null(node: Any) -> Any:
    """The document with every `nullable: true` schema read as "that schema, or null"."""
    if isinstance(node, list):
        return [_nullable_as_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    adapted = {key: _nullable_as_null(value) for key, value in node.items()}
    if adapted.get("nullable") is True:
        del adapted["nullable"]
        return {"anyOf": [adapted, {"type": "null"}]}
    return adapted


@functools.cache
def openai_document() -> dict[str, Any]:
    """OpenAI's OpenAPI document, as published (read once)."""
    path = require_reference(OPENAI_DOCUMENT)
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


@functools.cache
def _openai_registry() -> Registry[Any]:
    adapted = _nullable_as_null(openai_document())
    resource = Resource.from_contents(adapted, default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource(OPENAI_URI, resource)
    return registry


@functools.cache
def openai_validator(schema_name: str) -> Validator:
    """A Draft 2020-12 validator for `components/schemas/<schema_name>` of OpenAI's document,
    its `$ref`s resolved inside the document; no format checks."""
    if schema_name not in openai_document()["components"]["schemas"]:
        raise KeyError(f"{OPENAI_DOCUMENT} has no components/schemas/{schema_name}")
    schema = {"$ref": f"{OPENAI_URI}#/components/schemas/{schema_name}"}
    validator: Validator = Draft202012Validator(schema, registry=_openai_registry())
    return validator


def _described(error: ValidationError) -> str:
    """One error: where in the body, what, and where in the schema; an `anyOf`/`oneOf` that
    no branch matched adds its closest branch's reason."""
    where = "/".join(map(str, error.schema_path))
    text = f"{error.json_path}: {error.message} (schema at {where})"
    if error.context:
        closest = best_match(error.context)
        text += f"; closest: {closest.json_path}: {closest.message}"
    return text


def assert_openai(schema_name: str, body: Any) -> None:
    """Passes when `body` is valid against OpenAI's `schema_name`; otherwise an AssertionError
    listing every error by its JSON path, the most relevant first."""
    errors = list(openai_validator(schema_name).iter_errors(body))
    if not errors:
        return
    first = best_match(errors)
    rest = sorted((e for e in errors if e is not first), key=lambda e: list(e.absolute_path))
    lines = [f"  {_described(error)}" for error in [first, *rest]]
    shown = json.dumps(body, ensure_ascii=False)[:2000]
    raise AssertionError(
        f"not a valid OpenAI {schema_name}: {len(errors)} error(s)\n"
        + "\n".join(lines)
        + f"\nbody: {shown}"
    )


def sse_events(text: str) -> list[dict[str, Any] | str]:
    """The data payloads of a server-sent-event body, in order: each JSON-decoded, `[DONE]`
    kept as the string. An event's several `data:` lines are joined with newlines, as the
    event-stream format says."""
    events: list[dict[str, Any] | str] = []
    for block in re.split(r"\r\n\r\n|\n\n|\r\r", text):
        data = [
            line[5:].removeprefix(" ")
            for line in re.split(r"\r\n|\n|\r", block)
            if line.startswith("data:")
        ]
        if not data:
            continue
        payload = "\n".join(data)
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def ollama_reference(name: str = "api.md") -> str:
    """The text of a file of Ollama's API reference (`reference/ollama/<name>`)."""
    return require_reference(f"ollama/{name}").read_text(encoding="utf-8")


_OBJECT_INTRO = re.compile(r"^The `(\w+)` object has the following fields:\s*$")
_FIELD = re.compile(r"^- `(\w+)`")


def ollama_fields(endpoint_heading: str, of: str | None = None) -> set[str]:
    """The request fields api.md documents for one endpoint: the bullets of the "Parameters"
    part of its `## <endpoint_heading>` section (the plain and the advanced ones). With `of`,
    the fields of a nested object instead, from the list that begins "The `<of>` object has
    the following fields:" (`ollama_fields("Generate a chat completion", of="message")`).
    The options inside `options` are documented elsewhere (the Modelfile) and are not here."""
    text = ollama_reference("api.md")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    [section] = [s for s in sections if s.splitlines()[0].strip() == endpoint_heading] or [""]
    parameters = re.split(r"^### ", section, flags=re.MULTILINE)
    [part] = [p for p in parameters if p.startswith("Parameters")] or [""]
    if not part:
        raise AssertionError(f"api.md has no Parameters under '## {endpoint_heading}'")
    fields: dict[str | None, set[str]] = {}
    owner: str | None = None
    for line in part.splitlines():
        bullet = _FIELD.match(line)
        if bullet:
            fields.setdefault(owner, set()).add(bullet.group(1))
        elif line.strip() and not line.startswith(" "):
            intro = _OBJECT_INTRO.match(line)
            owner = intro.group(1) if intro else None
    if of not in fields:
        raise AssertionError(f"api.md documents no fields of {of or 'the request'} there")
    return fields[of]
