from __future__ import annotations

from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Budgets and call ledger"
