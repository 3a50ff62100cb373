"""Model aliases: the model names clients write ("gpt-4o-mini", "fast", "smart"), each a short
list of providers and the upstream model to ask each one for, tried in order."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from providers.models.provider import Provider, model_names

# What a client may write as `model`: OpenAI's model ids' characters (letters, digits and
# . _ - : /), starting with a letter or digit.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$")
model_name_validator = RegexValidator(
    MODEL_NAME,
    "Letters, digits, dots, dashes, underscores, colons and slashes, as OpenAI's model ids "
    "(e.g. gpt-4o-mini, fast, team/smart).",
    code="invalid_model_name",
)
# The cascade's own name, which no alias may take.
AUTO_MODEL = "auto"


class ModelAlias(models.Model):
    """A model name clients send, and which providers answer it with which model."""

    name = models.CharField(
        max_length=100,
        unique=True,
        validators=[model_name_validator],
        help_text="What clients send as 'model' (e.g. gpt-4o-mini, fast, smart). It may not be "
        'a provider\'s name or "auto".',
    )
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(
        default=True, help_text="A disabled alias is an unknown model (404) until enabled again."
    )
    then_cascade = models.BooleanField(
        "then the cascade",
        default=False,
        help_text="After its entries, go on with the rest of the providers by priority. Off: "
        "when none of its entries answers, the cached and static answers stand in.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "model alias"
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.name == AUTO_MODEL:
            raise ValidationError(
                {"name": '"auto" is the cascade\'s own name.'}, code="alias_name_taken"
            )
        if self.name and Provider.objects.filter(name=self.name).exists():
            raise ValidationError(
                {"name": f"'{self.name}' is a provider's name: asking for it asks that provider."},
                code="alias_name_taken",
            )


class AliasEntry(models.Model):
    """One provider of an alias, with the model to ask it for; entries are tried by position."""

    alias = models.ForeignKey(ModelAlias, on_delete=models.CASCADE, related_name="entries")
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="alias_entries")
    model = models.CharField(
        max_length=200,
        blank=True,
        help_text="The upstream model to ask for: the provider's own model or one of its other "
        "chat models. Empty: the provider's own.",
    )
    position = models.PositiveSmallIntegerField(default=0, help_text="Lower is tried first.")

    class Meta:
        ordering = ["position", "id"]
        verbose_name = "alias entry"
        verbose_name_plural = "alias entries"
        constraints = [
            models.UniqueConstraint(
                fields=["alias", "provider", "model"], name="alias_entry_unique"
            )
        ]

    def __str__(self) -> str:
        provider = self.provider.name if self.provider_id is not None else "?"
        return f"{provider}: {self.model or 'its own model'}"

    def clean(self) -> None:
        if self.provider_id is None or not self.model:
            return
        served = (self.provider.model, *model_names(self.provider.chat_models))
        if self.model not in served:
            raise ValidationError(
                {
                    "model": f"{self.provider.name} serves {', '.join(served)}: add "
                    f"'{self.model}' to its other chat models first."
                },
                code="model_not_served",
            )
