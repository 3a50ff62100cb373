"""The client apps: who may call the API, with which key, how often and for what."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from gateway.engine.clients import ANY_MODEL, StandIn
from providers.models.alias import MODEL_NAME


def lines_of(value: str) -> list[str]:
    """The entries of a one-per-line (or comma-separated) field, trimmed, blanks dropped."""
    return [item.strip() for item in value.replace(",", "\n").splitlines() if item.strip()]


def origin_list_validator(value: str) -> None:
    """Each entry an origin as a browser sends it: scheme, host and port, nothing more."""
    for origin in lines_of(value):
        try:
            parts = urlsplit(origin)
            parts.port  # noqa: B018 - raises on a port that isn't a number
        except ValueError:
            parts = None
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username is not None
            or parts.password is not None
            or parts.path not in ("",)
            or parts.query
            or parts.fragment
        ):
            raise ValidationError(
                f"'{origin}' is not an origin: write scheme, host and port only, as a browser "
                "sends it (e.g. https://shop.example.com or http://localhost:3000).",
                code="invalid_origin",
            )


def origins_normalised(value: str) -> frozenset[str]:
    return frozenset(origin.rstrip("/").lower() for origin in lines_of(value))


CLIENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
client_name_validator = RegexValidator(
    CLIENT_NAME,
    "Letters, digits, dots, dashes and underscores (it names the app in the ledger and in "
    "budgets).",
    code="invalid_client_name",
)


class ClientApp(models.Model):
    """A frontend or service that calls the API with its own key. The key itself is shown once,
    when it is made; only its digest and its visible prefix are kept."""

    name = models.CharField(
        max_length=64,
        unique=True,
        validators=[client_name_validator],
        help_text="Names the app in the ledger, in client budgets and in reports.",
    )
    description = models.CharField(max_length=200, blank=True)
    key_prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_digest = models.CharField(max_length=64, unique=True, editable=False)
    enabled = models.BooleanField(
        default=True, help_text="A disabled app's key is refused until it is enabled again."
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    requests_per_minute = models.PositiveIntegerField(
        default=600, help_text="Requests in any 60 s; 0 for no limit."
    )
    tokens_per_minute = models.PositiveIntegerField(
        default=200_000,
        help_text="Prompt and answer tokens in any 60 s; 0 for no limit. Counted once a "
        "request is answered, so the request that crosses it still completes.",
    )
    allowed_origins = models.TextField(
        blank=True,
        validators=[origin_list_validator],
        help_text="Browser origins that may call with this key (CORS), one per line, e.g. "
        "https://shop.example.com. Empty: calls from browsers are refused; servers (which "
        "send no Origin) are not affected.",
    )
    allow_cloud = models.BooleanField(
        default=True,
        help_text="Whether this app's requests may reach paid cloud providers. Off: "
        "self-hosted providers, then the cache and static answers.",
    )
    allowed_models = models.TextField(
        blank=True,
        help_text=f"Providers and model aliases this app may ask for by name (the 'model' "
        f"field), one per line; {ANY_MODEL} for any. An alias not listed is allowed too when "
        f'every provider it names is. Empty: only "auto", the cascade.',
    )
    allow_high_priority = models.BooleanField(
        default=False,
        help_text='Whether this app may send priority "high" (served past the budgets\' '
        "high-priority-only level).",
    )
    can_read_status = models.BooleanField(
        default=False, help_text="Whether this key may read GET /api/v1/status."
    )
    # The stand-ins its clients take for an answer when no provider gives one. All three for a
    # widget, where any answer beats an error; none for an agent's backend, which would take
    # the apology for the model's answer and must get a 503 it can retry instead.
    accept_cached = models.BooleanField(
        "takes cached answers",
        default=True,
        help_text="When no provider answers: an answer saved earlier for the same question.",
    )
    accept_static = models.BooleanField(
        "takes static answers",
        default=True,
        help_text="When no provider answers: the closest of the prepared static answers.",
    )
    accept_degraded = models.BooleanField(
        "takes the degradation message",
        default=True,
        help_text="When nothing else answers: the policy's apology. Off for an agent's "
        "backend, with the two above: it gets a 503 with Retry-After instead.",
    )
    # Off: its answers are cached for it alone, so no other app is served one as a stand-in.
    # On for apps that show the same public answers (FAQ widgets): they share one cache.
    shared_answer_cache = models.BooleanField(
        "shares the answer cache",
        default=False,
        help_text="Off: the answers cached for this app are served to it alone. On: it is "
        "served, and adds to, the answers of every app that shares the cache (for public "
        "widgets that ask the same questions).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "client app"

    def __str__(self) -> str:
        return self.name

    @property
    def usable(self) -> bool:
        return self.enabled and self.revoked_at is None

    @property
    def stand_ins(self) -> frozenset[StandIn]:
        taken = (
            (StandIn.CACHED, self.accept_cached),
            (StandIn.STATIC, self.accept_static),
            (StandIn.DEGRADED, self.accept_degraded),
        )
        return frozenset(stand_in for stand_in, accepted in taken if accepted)

    def clean(self) -> None:
        unknown = [
            name
            for name in lines_of(self.allowed_models)
            if name != ANY_MODEL and not MODEL_NAME.match(name)
        ]
        if unknown:
            raise ValidationError(
                {
                    "allowed_models": f"'{unknown[0]}' is not a provider's or an alias's name "
                    f"(or {ANY_MODEL})."
                }
            )
