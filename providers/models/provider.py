"""The provider registry: who can answer, where, with which key variable, at what price."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from providers.models.secret_env import (
    ENV_VAR_NAME,
    secret_destination_problem,
    secret_env_problem,
    secret_env_read,
)
from providers.models.validators import at_least, env_var_name_validator, http_url_validator


class ProviderKind(models.TextChoices):
    OLLAMA = "ollama", "Ollama"
    OPENAI_COMPATIBLE = "openai", "OpenAI-compatible"
    AZURE_OPENAI = "azure", "Azure OpenAI"
    ANTHROPIC = "anthropic", "Anthropic"


class Thinking(models.TextChoices):
    OFF = "off", "off"
    ON = "on", "on"
    LOW = "low", "low"
    MEDIUM = "medium", "medium"
    HIGH = "high", "high"


keep_alive_validator = RegexValidator(
    r"^(-1|0|\d{1,6}(\.\d{1,3})?(ms|s|m|h)?)$",
    "A duration as Ollama takes it: 30m, 24h, 90s, 0 (unload at once) or -1 (keep loaded).",
    code="invalid_keep_alive",
)
model_names_validator = RegexValidator(
    r"^[^\s,]+(\s*\n\s*[^\s,]+)*\s*$",
    "One model name a line.",
    code="invalid_model_names",
)


def model_names(text: str) -> tuple[str, ...]:
    """The names of a one-a-line field, in order, without blanks or repeats."""
    return tuple(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


class TokenLimitField(models.TextChoices):
    MAX_TOKENS = "max_tokens", "max_tokens"
    MAX_COMPLETION_TOKENS = "max_completion_tokens", "max_completion_tokens"


class Provider(models.Model):
    """One upstream model endpoint the router may send a request to."""

    name = models.SlugField(
        max_length=64, unique=True, help_text="Short unique name, used in headers and the ledger."
    )
    kind = models.CharField(max_length=16, choices=ProviderKind.choices)
    base_url = models.URLField(
        "base URL",
        max_length=500,
        validators=[http_url_validator],
        help_text="e.g. http://127.0.0.1:11434 for Ollama, https://api.openai.com for OpenAI. "
        "OpenAI-compatible: the base URL as the provider publishes it for OpenAI's SDKs "
        "(https://generativelanguage.googleapis.com/v1beta/openai, http://proxy/llm/v1); "
        "/chat/completions and /models go under it, and a URL without a path means its /v1. "
        "Azure OpenAI: the resource's endpoint (https://RES.openai.azure.com), or "
        "https://RES.openai.azure.com/openai/v1 for its v1 API. "
        "Loopback and private addresses need OUTBOUND_ALLOW; link-local and cloud metadata "
        "addresses are never called.",
    )
    model = models.CharField(
        max_length=200,
        help_text="The model name the provider expects (for Azure OpenAI, the deployment's "
        "name). The one it answers chat with unless a model alias names another.",
    )
    chat_models = models.TextField(
        "other chat models",
        blank=True,
        validators=[model_names_validator],
        help_text="Other model names it serves for chat, one a line, that model aliases may name.",
    )
    embedding_models = models.TextField(
        blank=True,
        validators=[model_names_validator],
        help_text="Model names it serves for embeddings (POST /v1/embeddings), one a line; "
        "the first is its default. Empty: it doesn't embed.",
    )
    api_version = models.CharField(
        "API version",
        max_length=32,
        blank=True,
        help_text="Azure OpenAI: the api-version query parameter (e.g. 2024-10-21; v1 for its "
        "v1 API, a base URL ending in /openai/v1).",
    )
    think = models.CharField(
        "thinking",
        max_length=8,
        choices=Thinking.choices,
        default=Thinking.OFF,
        help_text="Ollama: whether a thinking model thinks before it answers (Ollama's think; "
        "low / medium / high for models that take a level). Off by default: thinking delays "
        "the answer's first token, which the breaker judges.",
    )
    keep_alive = models.CharField(
        max_length=16,
        blank=True,
        validators=[keep_alive_validator],
        help_text="Ollama: how long the model stays loaded after a request (30m, 24h, -1 for "
        "always). Empty: Ollama's own default, 5 minutes.",
    )
    api_key_env = models.CharField(
        "API key variable",
        max_length=100,
        blank=True,
        validators=[env_var_name_validator],
        help_text="Name of the environment variable holding the API key. "
        "The key itself never enters the database.",
    )
    priority = models.PositiveSmallIntegerField(
        default=100, help_text="Lower goes first. The lowest enabled provider is the primary."
    )
    weight = models.PositiveSmallIntegerField(
        default=100,
        validators=[
            MinValueValidator(1, "The weight must be at least 1."),
            MaxValueValidator(10_000, "The weight must be at most 10000."),
        ],
        help_text="With the weighted strategy, providers of the same priority share traffic in "
        "proportion to their weights (each user stays on one of them).",
    )
    enabled = models.BooleanField(default=True)
    is_local = models.BooleanField(
        "self-hosted",
        default=False,
        help_text="Self-hosted (local) rather than a cloud API: local-only traffic may use it "
        "and cloud budgets never block it.",
    )
    timeout_s = models.FloatField(
        "timeout (s)",
        default=15.0,
        validators=[
            MinValueValidator(0.1, "The timeout must be at least 0.1 s."),
            MaxValueValidator(600, "The timeout must be at most 600 s."),
        ],
    )
    max_in_flight = models.PositiveIntegerField(
        "calls in flight at most",
        default=64,
        validators=[MaxValueValidator(10_000, "At most 10,000 calls in flight.")],
        help_text="Calls that may wait on this provider at once, in each serving process; past "
        "it a request goes to the next provider at once instead of queueing behind a provider "
        "that may be stuck. 0: no limit.",
    )
    runbook = models.TextField(
        blank=True,
        max_length=2000,
        help_text="What to try first when this provider is in trouble, one step a line (for "
        "example `systemctl status ollama`). Quoted in its alerts.",
    )
    supports_tools = models.BooleanField(
        "can call tools",
        default=True,
        help_text="The model and its server take tools and answer with tool calls. When off, "
        "requests that offer tools (or carry a conversation with tool calls) pass it over.",
    )
    supports_thinking = models.BooleanField(
        "thinks when asked",
        default=False,
        help_text="The model thinks before it answers when a request asks (Anthropic's "
        "thinking, OpenAI's reasoning_effort, Ollama's think). When off, a request's thinking "
        "is dropped for it (named in the answer's X-Failover-Dropped and in the ledger); an "
        "Ollama provider then thinks as its thinking setting says.",
    )
    supports_images = models.BooleanField(
        "reads images",
        default=False,
        help_text="The model takes images in a conversation. When off, requests that carry an "
        "image pass it over.",
    )
    supports_json_output = models.BooleanField(
        "can give JSON output",
        default=True,
        help_text="The model can be held to JSON (response_format). When off, requests that ask "
        "for JSON pass it over.",
    )
    token_limit_field = models.CharField(
        "token limit sent as",
        max_length=32,
        choices=TokenLimitField.choices,
        default=TokenLimitField.MAX_TOKENS,
        help_text="OpenAI-compatible providers: the field the answer's token limit goes in. "
        "OpenAI's reasoning models take only max_completion_tokens; many compatible servers "
        "only max_tokens.",
    )
    context_window = models.PositiveIntegerField(
        default=8192,
        validators=at_least(256, "The context window"),
        help_text="In tokens.",
    )
    price_input_per_1m = models.DecimalField(
        "price per 1M input tokens",
        max_digits=12,
        decimal_places=6,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"), "A price cannot be negative.")],
    )
    price_output_per_1m = models.DecimalField(
        "price per 1M output tokens",
        max_digits=12,
        decimal_places=6,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"), "A price cannot be negative.")],
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["priority", "name"]
        indexes = [models.Index(fields=["enabled", "priority"], name="provider_enabled_prio")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()}, {self.model})"

    def clean(self) -> None:
        # The key variable must be one the secret-variable rule allows (a name that isn't a
        # variable name at all is the field's own validator's to report).
        if self.kind == ProviderKind.AZURE_OPENAI and not self.api_version:
            raise ValidationError(
                {"api_version": "Azure OpenAI needs its api-version (e.g. 2024-10-21)."},
                code="api_version_required",
            )
        name = self.api_key_env
        if name and ENV_VAR_NAME.fullmatch(name):
            problem = secret_env_problem(name)
            if problem:
                raise ValidationError({"api_key_env": problem}, code="secret_env_not_allowed")
            # The key goes where the base URL points: only to a host its variable is bound to.
            problem = secret_destination_problem(name, self.base_url)
            if problem:
                raise ValidationError({"api_key_env": problem}, code="secret_destination")

    @property
    def api_key_problem(self) -> str:
        """Why this process has no key for it ("" when it has one, or needs none), without
        reading the key out."""
        return secret_env_read(self.api_key_env, self.base_url)[1] if self.api_key_env else ""

    @property
    def api_key_configured(self) -> bool:
        """Whether the named variable is allowed and set in this process."""
        return bool(self.api_key_env) and not self.api_key_problem
