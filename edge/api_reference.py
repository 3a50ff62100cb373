"""The OpenAPI document (`edge.api.openapi.openapi_document`) as the API reference shows it.

`reference_build` turns the document into frozen view objects that
`templates/front/api_reference.html` lays out: each operation by tag with its parameters,
request body and responses, each component schema once (`edge/schema_view.py`), and
the security schemes. A component that is one operation's request body alone is rendered in
full there, where a reader looks for it; everywhere else it is a link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.utils.safestring import SafeString

from edge.schema_view import (
    REF_PREFIX,
    Schema,
    any_view,
    prose,
    schema_anchor,
    schema_view,
)

# The keys of a path item that are operations (the others: its summary, shared parameters).
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class Parameter:
    name: str
    location: str
    required: bool
    description: SafeString
    schema: Schema


@dataclass(frozen=True)
class Content:
    media_type: str
    schema: Schema


@dataclass(frozen=True)
class Header:
    name: str
    required: bool
    description: SafeString
    schema: Schema


@dataclass(frozen=True)
class Response:
    status: str
    description: SafeString
    content: tuple[Content, ...]
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class Body:
    required: bool
    content: tuple[Content, ...]
    component: str  # the component its schema names, rendered here in full ("" when none)
    expanded: Schema | None  # that component's schema


@dataclass(frozen=True)
class Operation:
    method: str  # lower case, as the document keys it
    path: str
    anchor: str
    operation_id: str
    tag: str  # its first tag: the section it is listed in
    summary: SafeString
    description: SafeString
    security: tuple[tuple[str, ...], ...]  # any one of these, each all of its schemes; () none
    parameters: tuple[Parameter, ...]
    body: Body | None
    responses: tuple[Response, ...]


@dataclass(frozen=True)
class Tag:
    name: str
    description: SafeString
    operations: tuple[Operation, ...]


@dataclass(frozen=True)
class Component:
    name: str
    anchor: str
    schema: Schema | None  # None: rendered in full as `body_of`'s request body instead
    body_of: Operation | None


@dataclass(frozen=True)
class SecurityScheme:
    name: str
    summary: str  # "HTTP bearer", "header X-Api-Key"
    description: SafeString


@dataclass(frozen=True)
class Reference:
    title: str
    version: str
    openapi: str
    description: SafeString
    tags: tuple[Tag, ...]
    components: tuple[Component, ...]
    security_schemes: tuple[SecurityScheme, ...]


def _contents(content: dict[str, Any]) -> tuple[Content, ...]:
    return tuple(
        Content(media, schema_view(entry.get("schema", {})) if entry.get("schema") else any_view())
        for media, entry in content.items()
    )


def _component_named(schema: dict[str, Any]) -> str:
    ref = str(schema.get("$ref", ""))
    return ref.removeprefix(REF_PREFIX) if ref.startswith(REF_PREFIX) else ""


def _body(body: dict[str, Any] | None, components: dict[str, Any], taken: set[str]) -> Body | None:
    if body is None:
        return None
    content = body.get("content", {})
    names = [_component_named(entry.get("schema", {})) for entry in content.values()]
    # A component that is this body alone is rendered here, once, where a reader looks for it.
    name = names[0] if len(names) == 1 and names[0] in components and names[0] not in taken else ""
    if name:
        taken.add(name)
    return Body(
        required=bool(body.get("required", False)),
        content=_contents(content),
        component=name,
        expanded=schema_view(components[name]) if name else None,
    )


def _operation(
    path: str, method: str, raw: dict[str, Any], document: dict[str, Any], taken: set[str]
) -> Operation:
    components = document.get("components", {}).get("schemas", {})
    # An operation without its own `security` has the document's.
    security = raw.get("security", document.get("security", []))
    return Operation(
        method=method,
        path=path,
        anchor=f"op-{raw.get('operationId') or re.sub(r'[^A-Za-z0-9]+', '-', method + path)}",
        operation_id=raw.get("operationId", ""),
        tag=(raw.get("tags") or ["other"])[0],
        summary=prose(raw.get("summary", "")),
        description=prose(raw.get("description", "")),
        security=tuple(tuple(choice) for choice in security if choice),
        parameters=tuple(
            Parameter(
                name=p["name"],
                location=p.get("in", ""),
                required=bool(p.get("required", False)),
                description=prose(p.get("description", "")),
                schema=schema_view(p.get("schema", {})),
            )
            for p in raw.get("parameters", ())
        ),
        body=_body(raw.get("requestBody"), components, taken),
        responses=tuple(
            Response(
                status=status,
                description=prose(response.get("description", "")),
                content=_contents(response.get("content", {})),
                headers=tuple(
                    Header(
                        name=name,
                        required=bool(header.get("required", False)),
                        description=prose(header.get("description", "")),
                        schema=schema_view(header.get("schema", {})),
                    )
                    for name, header in response.get("headers", {}).items()
                ),
            )
            for status, response in raw.get("responses", {}).items()
        ),
    )


def _security_scheme(name: str, scheme: dict[str, Any]) -> SecurityScheme:
    if scheme.get("type") == "http" and scheme.get("scheme") == "bearer":
        summary = "the Authorization header: Bearer and the key"
    elif scheme.get("type") == "http":
        summary = f"HTTP {scheme.get('scheme', '')} authentication"
    elif scheme.get("type") == "apiKey":
        summary = f"the {scheme.get('name', '')} {scheme.get('in', '')}"
    else:
        summary = str(scheme.get("type", ""))
    return SecurityScheme(name, summary, prose(scheme.get("description", "")))


def reference_build(document: dict[str, Any]) -> Reference:
    """The whole reference, from the document as /api/openapi.json serves it (not changed)."""
    components: dict[str, Any] = document.get("components", {}).get("schemas", {})
    taken: set[str] = set()
    operations = [
        _operation(path, method, raw, document, taken)
        for path, methods in document.get("paths", {}).items()
        for method, raw in methods.items()
        if method in METHODS
    ]
    described = {tag["name"]: tag.get("description", "") for tag in document.get("tags", ())}
    # The document's tags in its order, then any an operation names that it doesn't describe.
    names = dict.fromkeys([*described, *(op.tag for op in operations)])
    tags = tuple(
        Tag(name, prose(described.get(name, "")), tuple(op for op in operations if op.tag == name))
        for name in names
    )
    bodies = {op.body.component: op for op in operations if op.body and op.body.component}
    info = document.get("info", {})
    return Reference(
        title=info.get("title", ""),
        version=str(info.get("version", "")),
        openapi=str(document.get("openapi", "")),
        description=prose(info.get("description", "")),
        tags=tuple(tag for tag in tags if tag.operations),
        components=tuple(
            Component(
                name,
                schema_anchor(name),
                None if name in bodies else schema_view(schema),
                bodies.get(name),
            )
            for name, schema in components.items()
        ),
        security_schemes=tuple(
            _security_scheme(name, scheme)
            for name, scheme in document.get("components", {}).get("securitySchemes", {}).items()
        ),
    )
