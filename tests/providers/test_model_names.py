"""Model names as users' code writes them ("gpt-4o-mini", "llama3.1:8b"): a model an enabled
provider serves goes to the providers serving it first, then down the cascade; `/v1/models`
lists them; the demo's `fast` and `smart` aliases. Through the official `openai` SDK and
langchain-openai on a real socket, and the reading itself over an in-memory snapshot."""

from __future__ import annotations

import io
from collections.abc import Iterator

import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command

from billing.seeding import demo_configuration_load
from devtools.fake_provider import FakeProvider
from edge.api.access import Caller
from edge.api.json_body import ApiError
from edge.api.models import ModelChoice, Purpose, resolve_model
from gateway.adapters.messages import CompletionRequest
from gateway.engine.clients import ClientConfig
from gateway.engine.config import AliasConfig, PolicyConfig, ProviderConfig, Snapshot
from gateway.engine.rate import Limits
from gateway.routing.strategies import ordered
from gateway.routing.walk import RouteRequest
from providers.models import AliasEntry, ModelAlias, Provider
from providers.selectors import snapshot_build
from providers.services.audit import row_save
from tests.factories import TEST_CLIENT_KEY, make_client_app, make_provider
from tests.providers.conftest import ledger_rows
from tests.providers.test_model_aliases import alias_save, rebuilt

live = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "Say hello."}]
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
SPARE_TEXT = "Hello from the spare."
LOCAL_EMBEDDER = "nomic-embed-text"
CLOUD_EMBEDDER = "text-embedding-3-small"
NARROW_KEY = "fgw_a-key-that-may-name-only-ollama-local-0000"


def sdk(live_url: str, key: str = TEST_CLIENT_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=live_url + "/v1", api_key=key, max_retries=0, timeout=30)


async def ask(client: openai.AsyncOpenAI, model: str) -> tuple[str, str]:
    """Who answered a chat naming `model`, by the X-Failover-Provider header, and the text."""
    raw = await client.chat.completions.with_raw_response.create(model=model, messages=HELLO)
    return raw.headers["X-Failover-Provider"], raw.parse().choices[0].message.content or ""


def said(error: openai.APIStatusError) -> str:
    """The error's message, as the gateway wrote it."""
    return error.response.json()["error"]["message"]


@pytest.fixture
def spare() -> Iterator[FakeProvider]:
    with FakeProvider(models=["gpt-4o", "gpt-4o-mini"], text=SPARE_TEXT) as fake:
        yield fake


@pytest.fixture
async def two_serve_gpt_4o_mini(providers_configured, gateway, spare) -> None:
    """openai-spare (priority 30) serves gpt-4o-mini too, among its other chat models."""
    await sync_to_async(Provider.objects.create)(
        name="openai-spare",
        kind="openai",
        base_url=spare.url,
        model="gpt-4o",
        chat_models="gpt-4o-mini",
        priority=30,
        is_local=False,
        timeout_s=5,
    )
    await rebuilt(gateway)


# A served model's name, through the SDK --------------------------------------------------


@live
async def test_the_sdk_is_answered_by_the_provider_serving_the_model_it_names(
    live_url, gateway, primary, secondary
):
    async with sdk(live_url) as client:
        cloud = await ask(client, "gpt-4o-mini")
        local = await ask(client, "llama3.1:8b")
    assert cloud == ("openai-cloud", SECONDARY_TEXT)  # past the higher-priority local one
    assert local == ("ollama-local", PRIMARY_TEXT)
    assert (primary.calls, secondary.calls) == (1, 1)
    assert secondary.last_request("/v1/chat/completions")["body"]["model"] == "gpt-4o-mini"
    assert primary.last_request("/api/chat")["body"]["model"] == "llama3.1:8b"


@live
async def test_a_served_model_fails_over_down_the_cascade_when_its_provider_is_down(
    live_url, gateway, primary, secondary
):
    secondary.set_fault(mode="error")
    async with sdk(live_url) as client:
        assert await ask(client, "gpt-4o-mini") == ("ollama-local", PRIMARY_TEXT)
        secondary.set_fault(mode="ok")
        primary.set_fault(mode="error")
        assert await ask(client, "llama3.1:8b") == ("openai-cloud", SECONDARY_TEXT)
    cloud_down, local_down = await ledger_rows(gateway)
    assert [(a["provider"], a["outcome"], a["model"]) for a in cloud_down.attempts] == [
        ("openai-cloud", "error", "gpt-4o-mini"),
        ("ollama-local", "ok", "llama3.1:8b"),  # the cascade's provider, with its own model
    ]
    assert [(a["provider"], a["outcome"]) for a in local_down.attempts] == [
        ("ollama-local", "error"),
        ("openai-cloud", "ok"),
    ]


@live
async def test_every_provider_serving_the_model_is_asked_for_it_before_the_cascade(
    live_url, gateway, two_serve_gpt_4o_mini, primary, secondary, spare
):
    secondary.set_fault(mode="error")
    async with sdk(live_url) as client:
        assert await ask(client, "gpt-4o-mini") == ("openai-spare", SPARE_TEXT)
        spare.set_fault(mode="error")
        assert await ask(client, "gpt-4o-mini") == ("ollama-local", PRIMARY_TEXT)
    assert spare.last_request("/v1/chat/completions")["body"]["model"] == "gpt-4o-mini"
    _, both_down = await ledger_rows(gateway)
    assert [(a["provider"], a["model"]) for a in both_down.attempts] == [
        ("openai-cloud", "gpt-4o-mini"),
        ("openai-spare", "gpt-4o-mini"),
        ("ollama-local", "llama3.1:8b"),
    ]


@live
async def test_langchain_gets_an_answer_for_gpt_4o_mini(live_url, gateway, secondary):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="gpt-4o-mini", base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    )
    answer = await model.ainvoke("Say hello.")
    assert answer.content == SECONDARY_TEXT
    assert secondary.last_request("/v1/chat/completions")["body"]["model"] == "gpt-4o-mini"


# Chat models and embedding models stay apart --------------------------------------------


@pytest.fixture
async def embedders(providers_configured, gateway, primary, secondary) -> None:
    primary.set_fault(embedding_models=[LOCAL_EMBEDDER])
    secondary.set_fault(embedding_models=[CLOUD_EMBEDDER], models=["gpt-4o-mini", "gpt-4o"])

    def configure() -> None:
        Provider.objects.filter(name="ollama-local").update(embedding_models=LOCAL_EMBEDDER)
        Provider.objects.filter(name="openai-cloud").update(
            embedding_models=CLOUD_EMBEDDER, chat_models="gpt-4o"
        )

    await sync_to_async(configure)()
    await rebuilt(gateway)


@live
async def test_a_chat_model_on_the_embeddings_endpoint_is_a_404_naming_it_a_chat_model(
    live_url, embedders, primary, secondary
):
    async with sdk(live_url) as client:
        vectors = await client.embeddings.create(model=CLOUD_EMBEDDER, input="x")
        with pytest.raises(openai.NotFoundError) as caught:
            await client.embeddings.create(model="gpt-4o-mini", input="x")
    assert vectors.model == CLOUD_EMBEDDER and primary.calls == 0
    assert (caught.value.code, caught.value.param) == ("model_not_found", "model")
    assert "'gpt-4o-mini' is a chat model" in said(caught.value)
    assert secondary.calls == 1  # the embedding only


@live
async def test_an_embedding_model_on_the_chat_endpoint_is_a_404_naming_it_one(
    live_url, embedders, primary, secondary
):
    async with sdk(live_url) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(model=LOCAL_EMBEDDER, messages=HELLO)
    assert caught.value.code == "model_not_found"
    assert f"'{LOCAL_EMBEDDER}' is an embedding model" in said(caught.value)
    assert primary.calls + secondary.calls == 0


@live
async def test_an_unknown_name_is_a_404_that_says_a_providers_models_are_names_too(
    live_url, primary, secondary
):
    async with sdk(live_url) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(model="gpt-5-turbo", messages=HELLO)
    assert "The model 'gpt-5-turbo' does not exist here" in said(caught.value)
    assert "a model one of them serves" in said(caught.value)


# The model list and who may ask -----------------------------------------------------------


@live
async def test_the_model_list_names_each_served_model_once_as_the_key_may_use_it(
    live_url, embedders, two_serve_gpt_4o_mini, gateway
):
    def narrow_app_and_an_alias_named_like_a_model() -> None:
        make_client_app(key=NARROW_KEY, allowed_models="ollama-local")
        cloud = Provider.objects.get(name="openai-cloud")
        alias_save("gpt-4o", [(cloud, "gpt-4o")])

    await sync_to_async(narrow_app_and_an_alias_named_like_a_model)()
    await rebuilt(gateway)
    async with sdk(live_url) as client:
        models = [model async for model in client.models.list()]
        mini = await client.models.retrieve("gpt-4o-mini")
    async with sdk(live_url, NARROW_KEY) as narrow:
        narrow_ids = [model.id async for model in narrow.models.list()]
        with pytest.raises(openai.NotFoundError):
            await narrow.models.retrieve("gpt-4o-mini")
    assert [(model.id, model.owned_by) for model in models] == [
        ("auto", "failover"),
        ("gpt-4o", "failover"),  # the alias's name, listed once
        ("ollama-local", "ollama"),
        ("openai-cloud", "openai"),
        ("openai-spare", "openai"),
        ("llama3.1:8b", "ollama"),
        ("gpt-4o-mini", "openai"),  # served by two, listed once
        (LOCAL_EMBEDDER, "ollama"),
        (CLOUD_EMBEDDER, "openai"),
    ]
    assert (mini.id, mini.owned_by) == ("gpt-4o-mini", "openai")
    assert narrow_ids == ["auto", "ollama-local", "llama3.1:8b", LOCAL_EMBEDDER]


@live
async def test_an_app_not_allowed_every_serving_provider_gets_a_403(
    live_url, two_serve_gpt_4o_mini, gateway, primary, secondary, spare
):
    await sync_to_async(make_client_app)(key=NARROW_KEY, allowed_models="openai-cloud")
    await rebuilt(gateway)
    async with sdk(live_url, NARROW_KEY) as client:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
        assert await ask(client, "openai-cloud") == ("openai-cloud", SECONDARY_TEXT)
    assert (caught.value.status_code, caught.value.code) == (403, "model_not_allowed")
    assert (primary.calls, spare.calls) == (0, 0)


# The reading itself, over an in-memory snapshot -------------------------------------------


def _provider(name: str, priority: int, model: str, **fields) -> ProviderConfig:
    return ProviderConfig(
        name, "openai", "http://127.0.0.1:9", model, priority, False, 5, 8192, **fields
    )


def _caller(*allowed: str) -> Caller:
    app = ClientConfig("app", "fgw_x", allowed_models=frozenset(allowed))
    return Caller("app", app, "app", Limits(), True)


ANONYMOUS = Caller("anonymous", None, "198.51.100.7", Limits(), False)
SNAPSHOT = Snapshot(
    version=1,
    providers=(
        _provider("local", 10, "llama3.1:8b", chat_models=("qwen3:8b",)),
        _provider("cloud", 20, "gpt-4o-mini", embedding_models=("emb",)),
        _provider("spare", 30, "other", chat_models=("gpt-4o-mini", "cloud", "team")),
    ),
    policy=PolicyConfig(),
    aliases=(
        AliasConfig("team", (("local", "qwen3:8b"),)),
        AliasConfig("llama3.1:8b", (("cloud", "gpt-4o-mini"),), then_cascade=True),
    ),
)


def test_a_served_model_is_its_providers_in_priority_order_then_the_cascade():
    choice = resolve_model(_caller("*"), SNAPSHOT, "gpt-4o-mini")
    assert choice == ModelChoice(
        group=(("cloud", "gpt-4o-mini"), ("spare", "gpt-4o-mini")), then_cascade=True
    )
    request = RouteRequest(CompletionRequest("hi"), "r", group=choice.group)
    walked = ordered(SNAPSHOT.providers, request, PolicyConfig())
    assert [(p.name, p.model) for p in walked] == [
        ("cloud", "gpt-4o-mini"),
        ("spare", "gpt-4o-mini"),
        ("local", "llama3.1:8b"),
    ]
    assert resolve_model(_caller("*"), SNAPSHOT, "qwen3:8b") == ModelChoice(
        group=(("local", "qwen3:8b"),)
    )


def test_auto_then_a_providers_name_then_an_alias_then_a_served_model():
    app = _caller("*")
    assert resolve_model(app, SNAPSHOT, "auto") == ModelChoice()
    # "cloud" is also one of spare's chat models: the provider's name wins.
    assert resolve_model(app, SNAPSHOT, "cloud") == ModelChoice(prefer="cloud")
    # "team" is an alias and one of spare's chat models; "llama3.1:8b" an alias and local's.
    assert resolve_model(app, SNAPSHOT, "team") == ModelChoice(
        group=(("local", "qwen3:8b"),), then_cascade=False
    )
    assert resolve_model(app, SNAPSHOT, "llama3.1:8b") == ModelChoice(
        group=(("cloud", "gpt-4o-mini"),)
    )


def test_an_app_may_ask_for_a_served_model_when_it_may_ask_for_every_provider_serving_it():
    assert isinstance(
        resolve_model(_caller("cloud", "spare"), SNAPSHOT, "gpt-4o-mini"), ModelChoice
    )
    assert isinstance(resolve_model(_caller("gpt-4o-mini"), SNAPSHOT, "gpt-4o-mini"), ModelChoice)
    for caller in (_caller("cloud"), ANONYMOUS):
        refused = resolve_model(caller, SNAPSHOT, "gpt-4o-mini")
        assert isinstance(refused, ApiError)
        assert (refused.status, refused.code) == (403, "model_not_allowed")
    assert resolve_model(ANONYMOUS, SNAPSHOT, "auto") == ModelChoice()


def test_the_embeddings_endpoint_reads_embedding_models_and_never_goes_on_to_another():
    app = _caller("*")
    assert resolve_model(app, SNAPSHOT, "emb", Purpose.EMBED) == ModelChoice(
        group=(("cloud", "emb"),), then_cascade=False
    )
    assert resolve_model(app, SNAPSHOT, "cloud", Purpose.EMBED) == ModelChoice(
        group=(("cloud", "emb"),), then_cascade=False
    )
    for name, said in [
        ("gpt-4o-mini", "is a chat model"),
        ("team", "is a model alias"),
        ("local", "names no embedding model"),
    ]:
        missing = resolve_model(app, SNAPSHOT, name, Purpose.EMBED)
        assert isinstance(missing, ApiError) and missing.status == 404
        assert said in missing.message
    on_chat = resolve_model(app, SNAPSHOT, "emb")
    assert isinstance(on_chat, ApiError) and "is an embedding model" in on_chat.message


# The demo's aliases ---------------------------------------------------------------------


@pytest.fixture
def embedded(settings) -> None:
    settings.DEBUG, settings.STATE_BACKEND, settings.REDIS_URL = True, "memory", ""


def _walk(snapshot: Snapshot, model: str) -> list[tuple[str, str]]:
    choice = resolve_model(_caller("*"), snapshot, model)
    assert isinstance(choice, ModelChoice), choice
    request = RouteRequest(
        CompletionRequest("hi"),
        "r",
        prefer=choice.prefer,
        group=choice.group,
        then_cascade=choice.then_cascade,
    )
    return [(p.name, p.model) for p in ordered(snapshot.providers, request, snapshot.policy)]


LOCAL = ("ollama-local", "llama3.1:8b")
CLOUD = ("openai-cloud", "gpt-4o-mini")


@pytest.mark.django_db
def test_the_demos_fast_and_smart_and_model_names_resolve_and_order(embedded):
    call_command("bootstrap", "--demo", stdout=io.StringIO())
    snapshot = snapshot_build(version=1, budgets=())
    assert {alias.name for alias in snapshot.aliases} == {"fast", "smart"}
    assert _walk(snapshot, "fast") == [LOCAL, CLOUD]
    assert _walk(snapshot, "smart") == [CLOUD, LOCAL]
    assert _walk(snapshot, "gpt-4o-mini") == [CLOUD, LOCAL]
    assert _walk(snapshot, "llama3.1:8b") == [LOCAL, CLOUD]
    assert _walk(snapshot, "auto") == [LOCAL, CLOUD]


@pytest.mark.django_db
def test_the_demos_aliases_are_loaded_once_and_a_deleted_one_stays_deleted(embedded):
    demo_configuration_load()  # a demo loaded before the aliases were part of it
    call_command("bootstrap", "--demo", stdout=io.StringIO())
    assert sorted(ModelAlias.objects.values_list("name", "then_cascade")) == [
        ("fast", True),
        ("smart", True),
    ]
    ModelAlias.objects.filter(name="smart").delete()
    call_command("bootstrap", "--demo", stdout=io.StringIO())
    assert list(ModelAlias.objects.values_list("name", flat=True)) == ["fast"]
    assert list(AliasEntry.objects.values_list("provider__name", "model")) == [("ollama-local", "")]


@pytest.mark.django_db
def test_a_demo_alias_whose_name_is_taken_is_passed_over(embedded):
    demo_configuration_load()
    row_save(row=ModelAlias(name="fast", description="ours"), actor=None)
    make_provider(name="smart", kind="openai", model="gpt-4o", is_local=False)
    call_command("bootstrap", "--demo", stdout=io.StringIO())
    assert list(ModelAlias.objects.values_list("name", "description")) == [("fast", "ours")]
