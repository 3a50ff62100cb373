"""The model names a request may give, on every door (OpenAI's model endpoints, `GET /v1/models`
and `GET /v1/models/{id}`, list them: `edge/api/openai/models.py`).

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

from dataclasses import dataclass
from enum import StrEnum

from edge.api.access import Caller, permitted
from edge.api.json_body import ApiError
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
