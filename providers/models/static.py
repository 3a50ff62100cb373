"""The static tier's answers, edited by operators without a deploy."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
from django.db import models


class StaticAnswer(models.Model):
    """A question the static tier can answer without any provider."""

    question = models.CharField(max_length=300, unique=True)
    alternative_phrasings = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(8000)],
        help_text="Other ways people ask the same question, one per line.",
    )
    # A TextField's max_length only shapes forms: the validator holds it for every write.
    answer = models.TextField(max_length=4000, validators=[MaxLengthValidator(4000)])
    enabled = models.BooleanField(default=True)
    hit_count = models.PositiveIntegerField(default=0, editable=False)
    last_hit_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
    )

    class Meta:
        ordering = ["question"]
        indexes = [models.Index(fields=["enabled"], name="static_answer_enabled")]

    def __str__(self) -> str:
        return self.question

    @property
    def phrasings(self) -> list[str]:
        """The question and every alternative phrasing, in order, without blanks."""
        alternatives = [line.strip() for line in self.alternative_phrasings.splitlines()]
        return [self.question.strip(), *(line for line in alternatives if line)]

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if not self.question.strip():
            errors["question"] = "The question cannot be blank."
        if not self.answer.strip():
            errors["answer"] = "The answer cannot be blank."
        lines = [line.strip() for line in self.alternative_phrasings.splitlines() if line.strip()]
        if any(len(line) > 300 for line in lines):
            errors["alternative_phrasings"] = "Each phrasing must be at most 300 characters."
        elif len({line.casefold() for line in lines}) != len(lines):
            errors["alternative_phrasings"] = "A phrasing is listed twice."
        if errors:
            raise ValidationError(errors)
