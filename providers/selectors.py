"""Reads of the control plane."""

from __future__ import annotations

from .models import FailoverPolicy


def policy_get() -> FailoverPolicy:
    """The one policy row, created with the defaults on first read."""
    policy, _ = FailoverPolicy.objects.get_or_create(pk=FailoverPolicy.SINGLETON_ID)
    return policy
