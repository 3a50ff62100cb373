"""The control plane's data: the provider registry, the model aliases, the failover policy, the
static answers and the client apps that may call the API, and the record of every operator
change and outage.

Models hold data and small properties; writes go through `providers.services`. One module per
model (or close family); this package is the one place Django and the rest of the code import
them from.
"""

from __future__ import annotations

from providers.models.alias import AliasEntry, ModelAlias
from providers.models.audit import ChangeAction, ConfigChange, Incident, IncidentClosedReason
from providers.models.client_app import ClientApp
from providers.models.policy import (
    CacheMode,
    FailoverPolicy,
    KillSwitch,
    Strategy,
    default_degradation_message,
)
from providers.models.provider import Provider, ProviderKind
from providers.models.static import StaticAnswer
from providers.models.validators import TASK_NAME, env_var_name_validator, http_url_validator

__all__ = [
    "TASK_NAME",
    "AliasEntry",
    "CacheMode",
    "ChangeAction",
    "ClientApp",
    "ConfigChange",
    "FailoverPolicy",
    "Incident",
    "IncidentClosedReason",
    "KillSwitch",
    "ModelAlias",
    "Provider",
    "ProviderKind",
    "StaticAnswer",
    "Strategy",
    "default_degradation_message",
    "env_var_name_validator",
    "http_url_validator",
]
