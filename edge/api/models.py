"""The model names a request may give, and OpenAI's model endpoints: `GET /v1/models` and
`GET /v1/models/{id}`.

`model` is read in this order, the first that matches winning:
1. "auto": the cascade;
2. a provider's name: that provider first, then the cascade;
3. a model alias's name: its entries in turn (each a provider and the upstream model to ask it
   for), then the cascade if the alias says so;
4. a model an enabled provider serves (its model or one of its other chat models): every
   provider serving it, by priority, each asked for it, then the cascade.
A provider's name wins over an alias of the same name (the admin refuses such an alias; a
provider named later shadows it), and both over a model name, so neither changes meaning when a
provider starts serving a model of that name. `resolve_model` is the one reading of it, for
every endpoint that takes a `model`.

The embeddings endpoint reads it the same way for its purpose (`Purpose.EMBED`): "auto" is
every provider that embeds, each with its first embedding model; a provider's name, its first
embedding model; a model name, the providers listing it among their embedding models. None of
them goes on to another embedding model: vectors of two models don't compare. Aliases name chat
models (the admin checks each entry's), so an alias's name there is a 404, as is a chat model's;
an embedding model's name on a chat endpoint is a 404 too.

Who may ask for what: "auto" is everyone's; a client app names what else it may ask for in
its allowed models ("*": anything). An alias or a model name it doesn't list is allowed too
when every provider it routes to first (the alias's entries, the providers serving the model)
is: it reaches nothing the app couldn't ask for by name. Anonymous callers get "auto" only.
The model list shows exactly what the key may ask for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.http import HttpRequest

from edge.api.access import Caller, permitted
from edge.api.common import Arrival, arrived_to_read
from edge.api.fields import JsonSchema
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.openai_common import openai_error, openai_json_errors
from gateway.engine.config import ProviderConfig, Snapshot

AUTO_MODEL = "auto"
OWNER = "failover"  # owned_by of "auto" and the aliases; a provider's is its kind
Entries = tuple[tuple[str, str], ...]  # (provider, upstream model) pairs, tried in turn


class Purpose(StrEnum):
    """What the endpoint asks a model for: a chat's answer, or an embedding's vectors."""

    CHAT = "chat"
    EMBED = "embed"


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """What a request's `model` asks for, as the router takes it (`RouteRequest`): a provider
    first (`prefer`), or (provider, model) entries (`group`: an alias's, or the providers
    serving a model) with or without the cascade after them; neither: the cascade."""

    prefer: str = ""
    group: Entries = ()
    then_cascade: bool = True


def served_models(provider: ProviderConfig, purpose: Purpose) -> tuple[str, ...]:
    """The model names `provider` answers for `purpose`."""
    if purpose is Purpose.EMBED:
        return provider.embedding_models
    return (provider.model, *provider.chat_models)


def served_by(snapshot: Snapshot, name: str, purpose: Purpose) -> Entries:
    """Every enabled provider serving the model `name` for `purpose`, by priority, each to be
    asked for it."""
    return tuple((p.name, name) for p in snapshot.providers if name in served_models(p, purpose))


def _entries_allowed(caller: Caller, entries: Entries) -> bool:
    """The app may ask for every provider of `entries` by name (and there is one)."""
    app = caller.app
    return (
        app is not None
        and bool(entries)
        and all(app.may_ask_for(provider) for provider, _ in entries)
    )


def resolve_model(
    caller: Caller, snapshot: Snapshot, name: str, purpose: Purpose = Purpose.CHAT
) -> ModelChoice | ApiError:
    """What `name` asks for, or why not: a 403 for what the caller may not ask for (given
    before anything says whether it exists), a 404 for a name that is nothing here."""
    if name == AUTO_MODEL:
        return _auto(snapshot, purpose)
    provider = snapshot.provider(name)
    alias = snapshot.alias(name) if provider is None else None
    served = served_by(snapshot, name, purpose) if provider is None and alias is None else ()
    if not _entries_allowed(caller, alias.entries if alias is not None else served):
        refusal = permitted(caller, prefer=name)
        if refusal is not None:
            return refusal.error
    if provider is not None:
        return _by_provider(provider, purpose)
    if alias is not None:
        if purpose is Purpose.EMBED:
            return _not_found(snapshot, name, purpose)
        return ModelChoice(group=alias.entries, then_cascade=alias.then_cascade)
    if served:
        return ModelChoice(group=served, then_cascade=purpose is Purpose.CHAT)
    return _not_found(snapshot, name, purpose)


def _auto(snapshot: Snapshot, purpose: Purpose) -> ModelChoice | ApiError:
    if purpose is Purpose.CHAT:
        return ModelChoice()
    group = tuple((p.name, p.embedding_models[0]) for p in snapshot.providers if p.embedding_models)
    if not group:
        return _missing("No enabled provider here names an embedding model", purpose)
    return ModelChoice(group=group, then_cascade=False)


def _by_provider(provider: ProviderConfig, purpose: Purpose) -> ModelChoice | ApiError:
    if purpose is Purpose.CHAT:
        return ModelChoice(prefer=provider.name)
    if not provider.embedding_models:
        return _missing(f"The provider '{provider.name}' names no embedding model", purpose)
    return ModelChoice(group=((provider.name, provider.embedding_models[0]),), then_cascade=False)


def _not_found(snapshot: Snapshot, name: str, purpose: Purpose) -> ApiError:
    if purpose is Purpose.CHAT:
        if served_by(snapshot, name, Purpose.EMBED):
            return _missing(f"'{name}' is an embedding model (POST /v1/embeddings)", purpose)
        return _missing(f"The model '{name}' does not exist here", purpose)
    if snapshot.alias(name) is not None:
        return _missing(f"'{name}' is a model alias, whose entries are chat models", purpose)
    if served_by(snapshot, name, Purpose.CHAT):
        return _missing(f"'{name}' is a chat model, not an embedding model", purpose)
    return _missing(f"No provider here embeds with '{name}'", purpose)


def _missing(what: str, purpose: Purpose) -> ApiError:
    if purpose is Purpose.EMBED:
        use = (
            'use "auto", a provider\'s name or an embedding model one of them serves (a '
            "provider row's embedding models)"
        )
    else:
        use = (
            'use "auto", a model alias, the name of an enabled provider or a model one of '
            "them serves"
        )
    return ApiError(404, "model_not_found", f"{what}: {use} (GET /v1/models lists them).", "model")


def model_objects(caller: Caller, snapshot: Snapshot) -> list[dict[str, Any]]:
    """What this caller may ask for, in OpenAI's Model shape, each name once: "auto", the
    aliases, the providers by priority, then the models they serve (the chat models, then the
    embedding models, each `owned_by` the kind of the first provider serving it)."""
    created = int(time.time())
    objects = [{"id": AUTO_MODEL, "object": "model", "created": created, "owned_by": OWNER}]
    listed = {AUTO_MODEL}

    def add(name: str, owner: str, purpose: Purpose = Purpose.CHAT, **extra: str) -> None:
        if name in listed or not isinstance(
            resolve_model(caller, snapshot, name, purpose), ModelChoice
        ):
            return
        listed.add(name)
        objects.append(
            {"id": name, "object": "model", "created": created, "owned_by": owner, **extra}
        )

    for alias in snapshot.aliases:
        if snapshot.provider(alias.name) is None:  # else the name is the provider's
            add(alias.name, OWNER)
    for provider in snapshot.providers:
        add(provider.name, provider.kind, upstream_model=provider.model)
    for purpose in Purpose:
        for provider in snapshot.providers:
            for name in served_models(provider, purpose):
                add(name, provider.kind, purpose)
    return objects


MODEL_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's Model: auto, a model alias, a provider or a model a provider "
    "serves, as this key may name it.",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string", "description": "failover, or the provider's kind."},
        "upstream_model": {
            "type": "string",
            "description": "A provider's own model (on a provider's name only).",
        },
    },
}
MODELS_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's model list: auto first, then each model alias, each provider and "
    "each model the providers serve (chat, then embedding models) that this key may ask for.",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "minItems": 1, "items": MODEL_SCHEMA},
    },
}


async def _listed(request: HttpRequest) -> list[dict[str, Any]] | JsonAnswer:
    """The models the request's key may ask for, or the answer refusing the request."""
    arrival = await arrived_to_read(request, openai_error)
    if not isinstance(arrival, Arrival):
        return arrival
    return model_objects(arrival.caller, await arrival.gateway.snapshots.current())


@openai_json_errors
async def model_list(request: HttpRequest) -> JsonAnswer:
    listed = await _listed(request)
    if isinstance(listed, JsonAnswer):
        return listed
    return JsonAnswer({"object": "list", "data": listed})


async def model_detail(request: HttpRequest, model: str) -> JsonAnswer:
    @openai_json_errors
    async def detail(request: HttpRequest) -> JsonAnswer:
        listed = await _listed(request)
        if isinstance(listed, JsonAnswer):
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
        return JsonAnswer(found)

    return await detail(request)
