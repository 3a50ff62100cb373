"""OpenAI's model endpoints: `GET /v1/models` and `GET /v1/models/{id}`, what the request's key
may name in `model` (`edge.api.models.resolve_model` reads it), in OpenAI's Model shape."""

from __future__ import annotations

import time
from typing import Any

from django.http import HttpRequest

from edge.api.access import Caller
from edge.api.arrival import Arrival, arrived_to_read
from edge.api.fields import JsonSchema
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.models import AUTO_MODEL, OWNER, ModelChoice, Purpose, resolve_model, served_models
from edge.api.openai.errors import openai_error, openai_json_errors
from gateway.engine.config import Snapshot


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
