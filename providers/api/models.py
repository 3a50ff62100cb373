"""The model names a request may give, and OpenAI's model endpoints: `GET /v1/models` and
`GET /v1/models/{id}`.

`model` is "auto" (the cascade), a model alias's name (its entries in turn: each a provider
and the upstream model to ask it for, then the cascade if the alias says so) or a provider's
name (that provider first, then the cascade). A provider's name wins over an alias of the same
name (the admin refuses such an alias; a provider named later shadows it). `resolve_model` is
the one reading of it, for every endpoint that takes a `model`.

Who may ask for what: "auto" is everyone's; a client app names what else it may ask for in
its allowed models ("*": anything). An alias it doesn't list is allowed too when every
provider among the alias's entries is: it reaches nothing the app couldn't ask for by name.
Anonymous callers get "auto" only. The model list shows exactly what the key may ask for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, JsonResponse

from failover_site.runtime.gateway import get_gateway
from providers.api.access import Caller, permitted
from providers.api.common import (
    Refusal,
    caller_of,
    checked_host,
    refused,
    wrong_method,
)
from providers.api.fields import JsonSchema
from providers.api.json_body import ApiError
from providers.api.openai_common import openai_error, openai_json_errors
from providers.engine.config import AliasConfig, Snapshot

AUTO_MODEL = "auto"
OWNER = "failover"  # owned_by of "auto" and the aliases; a provider's is its kind


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """What a request's `model` asks for, as the router takes it (`RouteRequest`): a provider
    first (`prefer`), or an alias's entries (`group`) with or without the cascade after them;
    neither: the cascade."""

    prefer: str = ""
    group: tuple[tuple[str, str], ...] = ()
    then_cascade: bool = True


def _alias_allowed(caller: Caller, alias: AliasConfig) -> bool:
    app = caller.app
    return (
        app is not None
        and bool(alias.entries)
        and all(app.may_ask_for(provider) for provider, _ in alias.entries)
    )


def resolve_model(caller: Caller, snapshot: Snapshot, name: str) -> ModelChoice | ApiError:
    """What `name` asks for, or why not: a 403 for what the caller may not ask for (given
    before anything says whether it exists), a 404 for a name that is nothing here."""
    if name == AUTO_MODEL:
        return ModelChoice()
    provider = snapshot.provider(name)
    alias = snapshot.alias(name) if provider is None else None
    if alias is None or not _alias_allowed(caller, alias):
        refusal = permitted(caller, prefer=name)
        if refusal is not None:
            return refusal.error
    if provider is not None:
        return ModelChoice(prefer=name)
    if alias is not None:
        return ModelChoice(group=alias.entries, then_cascade=alias.then_cascade)
    return ApiError(
        404,
        "model_not_found",
        f"The model '{name}' does not exist here: use \"auto\", a model alias or the name of an "
        "enabled provider (GET /v1/models lists them).",
        "model",
    )


def model_objects(caller: Caller, snapshot: Snapshot) -> list[dict[str, Any]]:
    """What this caller may ask for, in OpenAI's Model shape: "auto", the aliases, then the
    providers by priority."""
    created = int(time.time())
    objects = [{"id": AUTO_MODEL, "object": "model", "created": created, "owned_by": OWNER}]
    for alias in snapshot.aliases:
        shadowed = snapshot.provider(alias.name) is not None
        if not shadowed and isinstance(resolve_model(caller, snapshot, alias.name), ModelChoice):
            objects.append(
                {"id": alias.name, "object": "model", "created": created, "owned_by": OWNER}
            )
    for provider in snapshot.providers:
        if isinstance(resolve_model(caller, snapshot, provider.name), ModelChoice):
            objects.append(
                {
                    "id": provider.name,
                    "object": "model",
                    "created": created,
                    "owned_by": provider.kind,
                    "upstream_model": provider.model,
                }
            )
    return objects


MODEL_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's Model: auto, a model alias, or a provider this key may name.",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string", "description": "failover, or the provider's kind."},
        "upstream_model": {"type": "string", "description": "A provider's own model."},
    },
}
MODELS_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's model list: auto first, then each model alias and each provider "
    "this key may ask for.",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "minItems": 1, "items": MODEL_SCHEMA},
    },
}


async def _listed(request: HttpRequest) -> list[dict[str, Any]] | JsonResponse:
    """The models the request's key may ask for, or the answer refusing the request."""
    wrong = wrong_method(request, "GET", openai_error)
    if wrong is not None:
        return wrong
    problem = checked_host(request)
    if problem is not None:
        return openai_error(problem)
    gateway = get_gateway()
    caller = await caller_of(request, gateway)
    if isinstance(caller, Refusal):
        return refused(caller, openai_error)
    return model_objects(caller, await gateway.snapshots.current())


@openai_json_errors
async def model_list(request: HttpRequest) -> JsonResponse:
    listed = await _listed(request)
    if isinstance(listed, JsonResponse):
        return listed
    return JsonResponse({"object": "list", "data": listed})


async def model_detail(request: HttpRequest, model: str) -> JsonResponse:
    @openai_json_errors
    async def detail(request: HttpRequest) -> JsonResponse:
        listed = await _listed(request)
        if isinstance(listed, JsonResponse):
            return listed
        found = next((item for item in listed if item["id"] == model), None)
        if found is None:
            # As OpenAI answers it: what this key can't use is as absent as what isn't here.
            return openai_error(
                ApiError(
                    404,
                    "model_not_found",
                    f"The model '{model}' does not exist or this key may not use it.",
                    "model",
                )
            )
        return JsonResponse(found)

    return await detail(request)
