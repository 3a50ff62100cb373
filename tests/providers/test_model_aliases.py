"""Model aliases: the model names clients write, each a list of providers and upstream models
tried in turn, from the admin (audited) through the snapshot and the routing to the OpenAI
endpoints (`/v1/models`, `/v1/models/{id}`, a chat completion naming one)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.urls import reverse

from gateway.adapters.messages import CompletionRequest
from gateway.engine.config import PolicyConfig, ProviderConfig
from gateway.routing.answer_cache import answer_key
from gateway.routing.strategies import ordered
from gateway.routing.walk import RouteRequest
from providers.models import AliasEntry, ChangeAction, ConfigChange, ModelAlias, Provider
from providers.selectors import config_change_high_water, snapshot_build
from providers.services.audit import row_save
from tests.admin_forms import change_form_data
from tests.factories import TEST_CLIENT_KEY, make_client_app, make_provider
from tests.providers.conftest import ledger_rows
from tests.spec import assert_openai

URL = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Say hello."}]
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
LIMITED_KEY = "fgw_a-key-that-names-only-the-local-provider-00"

live = pytest.mark.django_db(transaction=True)


def alias_save(name: str, entries: list[tuple[Provider, str]], **fields: Any) -> ModelAlias:
    """An alias and its entries as the admin saves them: recorded, so the version moves."""
    alias = row_save(row=ModelAlias(name=name, **fields), actor=None)
    for position, (provider, model) in enumerate(entries):
        row_save(
            row=AliasEntry(alias=alias, provider=provider, model=model, position=position),
            actor=None,
        )
    return alias


@pytest.fixture
async def aliases(providers_configured, gateway, secondary) -> None:
    """ "fast": openai-cloud's gpt-4o-mini, then ollama-local's own model; "smart":
    openai-cloud's gpt-4o (one of its other chat models); "cloud-only": openai-cloud alone."""
    secondary.set_fault(models=["gpt-4o-mini", "gpt-4o"])
    local, cloud = providers_configured["primary"], providers_configured["secondary"]

    def configure() -> None:
        cloud.chat_models = "gpt-4o"
        row_save(row=cloud, actor=None)
        alias_save("fast", [(cloud, "gpt-4o-mini"), (local, "")], description="quick")
        alias_save("smart", [(cloud, "gpt-4o")])
        alias_save("cloud-only", [(cloud, "")])

    await sync_to_async(configure)()
    await rebuilt(gateway)


async def rebuilt(gateway) -> None:
    """The snapshot rebuilt now (a serving process polls for the change within a second)."""
    gateway.snapshots.mark_stale()
    await gateway.snapshots.refresh()


async def chat(api, model: str, **headers: str):
    return await api.post(URL, json={"model": model, "messages": HELLO}, headers=headers)


# Through the official SDK, on a real socket ------------------------------------------------


@live
async def test_the_sdk_finds_lists_and_asks_an_alias(live_url, aliases, primary, secondary):
    client = openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )
    async with client:
        fast = await client.models.retrieve("fast")
        listed = [model.id async for model in client.models.list()]
        completion = await client.chat.completions.create(model="fast", messages=HELLO)
    assert (fast.id, fast.object, fast.owned_by) == ("fast", "model", "failover")
    assert listed == [
        "auto",
        "cloud-only",
        "fast",
        "smart",
        "ollama-local",
        "openai-cloud",
        "llama3.1:8b",
        "gpt-4o-mini",
        "gpt-4o",
    ]
    # The alias's first entry answers: the secondary, asked for the entry's model.
    assert completion.choices[0].message.content == SECONDARY_TEXT
    assert (primary.calls, secondary.calls) == (0, 1)
    assert secondary.last_request("/v1/chat/completions")["body"]["model"] == "gpt-4o-mini"


# Routing --------------------------------------------------------------------------------


@live
async def test_an_alias_whose_first_entry_fails_is_answered_by_its_next(
    api, gateway, aliases, primary, secondary
):
    secondary.set_fault(mode="error")
    answer = await chat(api, "fast")
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == PRIMARY_TEXT
    assert answer.headers["X-Failover-Provider"] == "ollama-local"
    [record] = await ledger_rows(gateway)
    assert [(a["provider"], a["outcome"], a["model"]) for a in record.attempts] == [
        ("openai-cloud", "error", "gpt-4o-mini"),
        ("ollama-local", "ok", "llama3.1:8b"),
    ]
    assert record.model == "llama3.1:8b"


@live
async def test_an_alias_without_the_cascade_falls_back_past_its_entries_only(
    api, gateway, aliases, primary, secondary
):
    secondary.set_fault(mode="error")
    answer = await chat(api, "cloud-only")
    assert answer.status_code == 200
    assert answer.headers["X-Failover-Tier"] in ("static", "degraded")
    assert primary.calls == 0  # the cascade's providers are not the alias's

    def cascade_after() -> None:
        alias = ModelAlias.objects.get(name="cloud-only")
        alias.then_cascade = True
        row_save(row=alias, actor=None)

    await sync_to_async(cascade_after)()
    await rebuilt(gateway)
    after = await chat(api, "cloud-only")
    assert after.headers["X-Failover-Provider"] == "ollama-local"


@live
async def test_an_entry_asks_its_provider_for_the_entrys_model(api, gateway, aliases, secondary):
    answer = await chat(api, "smart")
    assert answer.headers["X-Failover-Provider"] == "openai-cloud"
    assert secondary.last_request("/v1/chat/completions")["body"]["model"] == "gpt-4o"
    # The same provider asked for by name still gets its own model.
    await chat(api, "openai-cloud")
    assert secondary.last_request("/v1/chat/completions")["body"]["model"] == "gpt-4o-mini"
    smart, named = await ledger_rows(gateway)
    assert (smart.model, smart.reason, named.model) == (
        "gpt-4o",
        "requested_by_name",
        "gpt-4o-mini",
    )


def _provider(name: str, priority: int) -> ProviderConfig:
    return ProviderConfig(
        name, "openai", "http://127.0.0.1:9", "m-" + name, priority, False, 5, 8192
    )


def test_an_alias_orders_its_entries_then_the_rest_by_priority_when_it_cascades():
    providers = [_provider("a", 10), _provider("b", 20), _provider("c", 30)]
    group = (("c", "other"), ("a", "m-a"))
    only = ordered(
        providers,
        RouteRequest(CompletionRequest("hi"), "r", group=group, then_cascade=False),
        PolicyConfig(),
    )
    assert [(p.name, p.model) for p in only] == [("c", "other"), ("a", "m-a")]
    then = ordered(
        providers, RouteRequest(CompletionRequest("hi"), "r", group=group), PolicyConfig()
    )
    assert [p.name for p in then] == ["c", "a", "b"]
    empty = RouteRequest(CompletionRequest("hi"), "r", then_cascade=False)
    assert ordered(providers, empty, PolicyConfig()) == []


def test_an_aliass_answers_are_cached_apart_from_the_cascades():
    request = CompletionRequest("hi")
    keys = {
        answer_key(request, scope="app:suite"),
        answer_key(request, (("openai-cloud", "gpt-4o"),), scope="app:suite"),
        answer_key(request, (("openai-cloud", "gpt-4o-mini"),), scope="app:suite"),
    }
    assert len(keys) == 3


# Who may ask for an alias, and the model endpoints ---------------------------------------


@live
async def test_the_model_list_and_each_model_are_openais_shapes(api, aliases):
    listed = (await api.get("/v1/models")).json()
    assert_openai("ListModelsResponse", listed)
    for model in listed["data"]:
        one = await api.get(f"/v1/models/{model['id']}")
        assert one.status_code == 200
        assert_openai("Model", one.json())
        assert one.json()["id"] == model["id"]
    missing = await api.get("/v1/models/gpt-5-turbo")
    assert missing.status_code == 404
    assert_openai("ErrorResponse", missing.json())
    assert missing.json()["error"]["code"] == "model_not_found"


@live
async def test_an_app_may_ask_for_an_alias_it_names_or_whose_providers_it_may(
    api, gateway, aliases
):
    await sync_to_async(make_client_app)(key=LIMITED_KEY, allowed_models="ollama-local\nsmart")
    await rebuilt(gateway)
    limited = {"Authorization": f"Bearer {LIMITED_KEY}"}
    listed = (await api.get("/v1/models", headers=limited)).json()["data"]
    assert [model["id"] for model in listed] == ["auto", "smart", "ollama-local", "llama3.1:8b"]
    assert (await chat(api, "smart", **limited)).status_code == 200  # named
    refused = await chat(api, "fast", **limited)  # openai-cloud is not the app's to name
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "model_not_allowed")
    assert (await api.get("/v1/models/fast", headers=limited)).status_code == 404
    unknown = await chat(api, "gpt-5-turbo")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "model_not_found")


@pytest.mark.django_db
def test_the_snapshot_leaves_out_disabled_aliases_and_entries_it_cannot_serve():
    local = make_provider(name="local", model="llama3.1:8b", chat_models="qwen3:8b")
    off = make_provider(name="off", enabled=False)
    alias_save("fast", [(off, ""), (local, ""), (local, "qwen3:8b")], then_cascade=True)
    alias_save("quiet", [(local, "")], enabled=False)
    Provider.objects.filter(pk=local.pk).update(chat_models="")  # edited since: qwen3 is gone
    [fast] = snapshot_build(version=1, budgets=()).aliases
    assert (fast.name, fast.entries, fast.then_cascade) == (
        "fast",
        (("local", "llama3.1:8b"),),
        True,
    )


# The admin ---------------------------------------------------------------------------------


@pytest.fixture
def operator(client, admin_user):
    client.force_login(admin_user)
    return admin_user


def _inline(entries: list[dict[str, Any]], initial: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = {
        "entries-TOTAL_FORMS": str(len(entries)),
        "entries-INITIAL_FORMS": str(initial),
        "entries-MIN_NUM_FORMS": "0",
        "entries-MAX_NUM_FORMS": "1000",
    }
    for index, entry in enumerate(entries):
        data.update({f"entries-{index}-{key}": value for key, value in entry.items()})
    return data


@pytest.mark.django_db
def test_the_admin_records_an_alias_and_its_entries_and_moves_the_version(client, operator):
    cloud = make_provider(name="cloud", kind="openai", model="gpt-4o-mini", chat_models="gpt-4o")
    ConfigChange.objects.all().delete()
    before = config_change_high_water()
    add_url = reverse("admin:providers_modelalias_add")
    data = change_form_data(client, add_url, name="smart", description="the big one")
    data |= _inline([{"position": "0", "provider": str(cloud.pk), "model": "gpt-4o"}])
    assert client.post(add_url, data).status_code == 302
    [entry] = AliasEntry.objects.filter(alias__name="smart")
    targets = sorted(ConfigChange.objects.values_list("target_type", "action"))
    assert targets == [("providers.aliasentry", "create"), ("providers.modelalias", "create")]
    assert config_change_high_water() != before

    # An entry's change alone, the alias itself untouched, is recorded too.
    change_url = reverse("admin:providers_modelalias_change", args=[entry.alias_id])
    edited = change_form_data(client, change_url)
    edited |= _inline(
        [
            {
                "id": str(entry.pk),
                "alias": str(entry.alias_id),
                "position": "0",
                "provider": str(cloud.pk),
                "model": "gpt-4o-mini",
            }
        ],  # fmt: skip
        initial=1,
    )
    assert client.post(change_url, edited).status_code == 302
    update = ConfigChange.objects.get(action=ChangeAction.UPDATE)
    assert (update.target_type, update.after) == ("providers.aliasentry", {"model": "gpt-4o-mini"})
    edited["entries-0-DELETE"] = "on"
    assert client.post(change_url, edited).status_code == 302
    deleted = ConfigChange.objects.get(action=ChangeAction.DELETE)
    assert (deleted.target_type, deleted.before["model"]) == ("providers.aliasentry", "gpt-4o-mini")
    assert not AliasEntry.objects.exists()
    listing = client.get(reverse("admin:providers_modelalias_changelist"))
    assert listing.status_code == 200 and "smart" in listing.content.decode()


@pytest.mark.django_db
def test_the_admin_refuses_an_entry_model_its_provider_does_not_serve(client, operator):
    cloud = make_provider(name="cloud", kind="openai", model="gpt-4o-mini")
    add_url = reverse("admin:providers_modelalias_add")
    data = change_form_data(client, add_url, name="smart")
    data |= _inline([{"position": "0", "provider": str(cloud.pk), "model": "gpt-5"}])
    response = client.post(add_url, data)
    assert response.status_code == 200
    assert "add &#x27;gpt-5&#x27; to its other chat models" in response.content.decode()
    assert not ModelAlias.objects.exists() and not ConfigChange.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["auto", "ollama-local", "no spaces", "émoji"])
def test_an_alias_may_not_take_the_cascades_or_a_providers_name_or_odd_characters(name):
    make_provider(name="ollama-local")
    with pytest.raises(ValidationError) as caught:
        ModelAlias(name=name).full_clean()
    assert "name" in caught.value.message_dict


@pytest.mark.django_db
def test_an_alias_takes_openais_model_id_characters_and_an_entry_its_providers_models():
    provider = make_provider(model="llama3.1:8b", chat_models="qwen3:8b\nmistral")
    alias = ModelAlias(name="team/gpt-4o-mini:latest_v1.2")
    alias.full_clean()
    alias.save()
    for model in ("", "llama3.1:8b", "qwen3:8b", "mistral"):
        AliasEntry(alias=alias, provider=provider, model=model).full_clean()
    with pytest.raises(ValidationError):
        AliasEntry(alias=alias, provider=provider, model="gpt-4o").full_clean()
