"""The immutable configuration the router reads: providers, model aliases, policy, budgets and
static answers.

Plain data: built from the database by `providers.selectors.snapshot_build` when the config
version moves, then swapped in whole (`runtime.snapshots`), so a request in steady
state reads plain Python objects and runs no SQL. Keys are resolved from the environment when
the snapshot is built, once, and never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gateway.engine.clients import Clients
from gateway.engine.faq import FaqIndex

# What a request gets when nothing else can answer, until an operator words it otherwise.
DEFAULT_DEGRADATION_MESSAGE = (
    "Sorry, our assistant is temporarily unavailable. Please try again in a few minutes, "
    "or contact support@brightline.example if it's urgent."
)


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    kind: str
    base_url: str
    model: str
    priority: int
    is_local: bool
    timeout_s: float
    context_window: int
    weight: int = 100
    max_in_flight: int = 0  # calls waiting on it at once in this process; 0: no limit
    price_input_per_1m: Decimal = Decimal("0")
    price_output_per_1m: Decimal = Decimal("0")
    chat_models: tuple[str, ...] = ()  # other models it serves for chat (aliases name them)
    embedding_models: tuple[str, ...] = ()  # the models it embeds with, its default first
    api_version: str = ""  # Azure OpenAI's api-version
    think: str = "off"  # Ollama: off / on / low / medium / high
    keep_alive: str = ""  # Ollama: how long the model stays loaded ("": Ollama's default)
    tools: bool = True  # it can call tools (the model and the server both)
    thinks: bool = False  # its model thinks when a request asks
    images: bool = False  # its model reads images
    json_output: bool = True  # it can be held to JSON output
    token_limit_field: str = "max_tokens"  # OpenAI-compatible: max_tokens / max_completion_tokens
    api_key: str = field(default="", repr=False)
    api_key_env: str = ""  # the variable's name: a provider that names one needs it set
    # Why its key is missing ("OPENAI_API_KEY is not set …", or a name the rule refuses).
    api_key_problem: str = ""
    # Every other secret this process can send (the other providers' keys, the channels'
    # tokens): scrubbed from this provider's words like its own key.
    other_secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What never leaves in this provider's words: its key and every other secret."""
        return (self.api_key, *self.other_secrets) if self.api_key else self.other_secrets

    @property
    def http_base_url(self) -> str:
        """The URL the adapter's paths are appended to (`api_base`)."""
        return api_base(self.kind, self.base_url)

    def cost(self, tokens_in: int, tokens_out: int) -> Decimal:
        return (
            self.price_input_per_1m * tokens_in + self.price_output_per_1m * tokens_out
        ) / 1_000_000


def api_base(kind: str, base_url: str) -> str:
    """The URL a provider's API paths are appended to, from its base URL as its kind takes it.

    - OpenAI-compatible: the base URL as OpenAI's SDKs take it, the URL that /chat/completions
      and /models go under (".../v1", Gemini's ".../v1beta/openai", a proxy's prefix), except
      that a bare origin means its /v1: "https://api.openai.com" is ".../v1".
    - Azure OpenAI: the resource's endpoint ("https://RES.openai.azure.com", or a gateway's
      prefix), which /openai/deployments/... goes under; the SDK's form ending in /openai is
      the same endpoint. One ending in /openai/v1 is Azure's v1 API, kept as given.
    - Ollama and Anthropic: what their /api/... and /v1/... paths go under; a trailing /v1 is
      the adapter's own.
    A trailing slash never matters.
    """
    base = base_url.rstrip("/")
    if kind == "openai":
        origin_only = "/" not in base.partition("://")[2]
        return base + "/v1" if origin_only else base
    if kind == "azure":
        return base[: -len("/openai")] if base.endswith("/openai") else base
    return base[:-3] if base.endswith("/v1") else base


def bucket_width(failure_window_s: int, p95_window_s: int) -> int:
    """Width of the breaker's statistics buckets: at most ~120 buckets per window."""
    return max(1, -(-max(failure_window_s, p95_window_s) // 120))


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    consecutive_failures: int = 3
    failure_rate_pct: float = 30
    failure_window_s: int = 60
    failure_min_calls: int = 5
    slow_call_s: float = 8.0
    slow_call_rate_pct: float = 50
    p95_latency_s: float = 5.0
    p95_window_s: int = 120
    # A call in flight past clamp(multiplier × the provider's p99, floor, cap) is stuck.
    stuck_multiplier: float = 3.0
    stuck_floor_s: float = 1.0
    stuck_cap_s: float = 10.0
    # No latency history yet, or a half-open probe: the request goes on at this bound while the
    # call runs on (`routing/hedge.py`).
    first_byte_bound_s: float = 1.5
    cooldown_s: int = 60
    cooldown_multiplier: float = 2.0
    max_cooldown_s: int = 600
    half_open_probes: int = 3
    non_compliant_is_failure: bool = False  # an answer that ignores the request: a failure too
    request_deadline_s: float = 30.0
    static_match_threshold: int = 85
    kill_switch: str = "off"
    kill_switch_provider: str = ""
    degradation_message: str = DEFAULT_DEGRADATION_MESSAGE
    store_prompts: bool = False
    local_only_tasks: frozenset[str] = frozenset()
    no_fallback_tasks: frozenset[str] = frozenset()
    cache_ttl_s: int = 86_400
    cache_mode: str = "fallback"  # fallback / cost_saver / off
    cloud_share_target_pct: float = 5.0
    currency: str = "EUR"
    time_zone: str = "UTC"  # budget periods begin at midnight here
    first_token_timeout_s: float = 10.0
    strategy: str = "priority"  # priority / hedged / weighted
    hedge_after_ms: int = 2000
    # The health sentinel (docs/architecture.md, "The breaker") and the warm keepalive.
    sentinel_interval_s: int = 30
    sentinel_window: int = 5
    sentinel_degraded_after: int = 3
    sentinel_down_after_s: int = 300
    model_load_grace_s: int = 120  # a loading model isn't failing for this long
    sentinel_check_timeout_s: float = 5.0
    sentinel_paid_probe: bool = False
    keepalive_enabled: bool = False
    keepalive_interval_s: int = 180
    # Requests without a client key (edge/api/access.py).
    anonymous_access: bool = False
    anonymous_requests_per_minute: int = 10
    anonymous_tokens_per_minute: int = 20_000
    anonymous_origins: frozenset[str] = frozenset()
    anonymous_allow_cloud: bool = False

    @property
    def bucket_s(self) -> int:
        return bucket_width(self.failure_window_s, self.p95_window_s)


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    id: int
    scope: str  # all / provider / client
    period: str  # day / month, in the policy's time zone
    cap: Decimal  # in the policy's currency, or in tokens
    warn_pct: int
    high_priority_only_pct: int
    hard_stop_pct: int
    provider: str = ""
    client: str = ""  # the client app's name, as requests and the ledger name it
    unit: str = "money"  # money / tokens

    def applies_to(self, provider: ProviderConfig, client: str) -> bool:
        if self.scope == "provider":
            return self.provider == provider.name
        if self.scope == "client":
            return self.client == client and not provider.is_local
        # Local providers are never blocked by a cloud budget.
        return not provider.is_local


@dataclass(frozen=True, slots=True)
class AliasConfig:
    """An enabled model alias: the (provider, upstream model) pairs a request naming it tries
    in turn (enabled providers only), and whether the rest of the cascade follows them."""

    name: str
    entries: tuple[tuple[str, str], ...]
    then_cascade: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    providers: tuple[ProviderConfig, ...]  # enabled ones, by priority
    policy: PolicyConfig
    budgets: tuple[BudgetConfig, ...] = ()
    faq: FaqIndex = field(default_factory=lambda: FaqIndex(()))
    clients: Clients = field(default_factory=Clients)
    aliases: tuple[AliasConfig, ...] = ()  # enabled ones, by name

    @property
    def cors_origins(self) -> frozenset[str]:
        """Every origin a browser may call the API from: some client app's, or the anonymous
        widget's while anonymous access is on."""
        origins = self.clients.origins
        if self.policy.anonymous_access:
            origins |= self.policy.anonymous_origins
        return origins

    @property
    def primary(self) -> ProviderConfig | None:
        return self.providers[0] if self.providers else None

    def provider(self, name: str) -> ProviderConfig | None:
        for provider in self.providers:  # a handful: a loop, asked on every request
            if provider.name == name:
                return provider
        return None

    def alias(self, name: str) -> AliasConfig | None:
        for alias in self.aliases:
            if alias.name == name:
                return alias
        return None
