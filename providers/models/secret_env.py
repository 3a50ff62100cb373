"""Which environment variables may hold a secret that the control plane names.

One rule for every secret variable an operator can name: a provider's API key variable, and an
alert channel's bot token, webhook URL or HMAC key variable. A name qualifies when it starts
with one of `SECRET_ENV_PREFIXES` or is listed in `SECRET_ENV_NAMES`, and never when it is one
of the platform's own settings (Django's, and every variable `failover_site/settings.py` reads),
whatever those lists say: otherwise anyone allowed to edit a provider could have `SECRET_KEY`
sent to a server of theirs as a bearer token.

A secret is also bound to where it may be sent (`SECRET_DESTINATIONS`: a scheme, a host and a
port; the rules in `gateway/engine/secret_destinations.py`): a row pairing a secret variable
with a URL anywhere else is refused, so no one who may edit a provider or a channel can send
another row's secret to a server of their own, nor to another listener on its host.

The rules are checked when a row is validated (the admin's forms, the services, the management
commands) and again each time a secret is read, so a row saved around the validation (an
`.update()`, a database edit) still gets nothing out of the environment.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
from pathlib import Path

from django.conf import global_settings, settings

from gateway.engine.scrub import KEPT_LIMIT, scrub_cut
from gateway.engine.secret_destinations import SecretDestinations

# What a variable's name may look like (a value pasted in place of a name fails it).
ENV_VAR_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# The platform's own variables that its settings module may not name (DJANGO_SETTINGS_MODULE,
# the Makefile's HOST and PORT), and the ones that matter most, in case a deployment's settings
# module reads them some other way.
_ALWAYS_REFUSED = frozenset(
    {
        "CELERY_BROKER_URL",
        "DATABASE_URL",
        "DJANGO_SETTINGS_MODULE",
        "EMAIL_URL",
        "HOST",
        "PORT",
        "REDIS_URL",
        "SECRET_KEY",
    }
)


def platform_env_names() -> frozenset[str]:
    """The names no secret may be read from: Django's settings, this deployment's settings,
    and every variable its settings module reads."""
    # The platform's settings module, and the one this deployment runs on if it is another
    # (under a test's settings override SETTINGS_MODULE reads None: the variable still names it).
    modules = {"failover_site.settings", os.environ.get("DJANGO_SETTINGS_MODULE", "")}
    modules.add(getattr(settings, "SETTINGS_MODULE", None) or "")
    return (
        _ALWAYS_REFUSED
        | {name for name in dir(global_settings) if name.isupper()}
        | {name for name in dir(settings) if name.isupper()}
        | frozenset().union(*(variables_read_by(module) for module in modules if module))
    )


@functools.cache
def variables_read_by(module: str) -> frozenset[str]:
    """Every variable `module` reads by name (`env.str("X", …)`, `env("X")`,
    `os.environ.get("X")`), found in its source rather than recorded as it runs, so a branch not
    taken here (PostgreSQL's DATABASE_CONN_MAX_AGE under SQLite) still counts."""
    spec = importlib.util.find_spec(module) if module else None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return frozenset()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first, callee = node.args[0], ast.unparse(node.func)
        reads_env = callee == "env" or callee.startswith("env.") or "environ" in callee
        if reads_env and isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.add(first.value)
    return frozenset(names)


def secret_env_problem(name: str) -> str:
    """Why the variable `name` may not hold a secret, or "" when it may."""
    if name in platform_env_names():
        return (
            f"{name} is one of the platform's own settings and can never hold a provider's or "
            "an alert channel's secret."
        )
    prefixes = [prefix for prefix in settings.SECRET_ENV_PREFIXES if prefix]
    if name in settings.SECRET_ENV_NAMES or any(name.startswith(p) for p in prefixes):
        return ""
    allowed = " or ".join(prefixes)
    start = f"start with {allowed} or " if allowed else ""
    return (
        f"{name} is not an allowed secret variable: its name must {start}be listed in "
        "SECRET_ENV_NAMES."
    )


def secret_destinations() -> SecretDestinations:
    """Where each secret variable may be sent, as the settings declare it."""
    return SecretDestinations(
        hosts=settings.SECRET_DESTINATIONS, loopback=settings.SECRET_DESTINATIONS_LOOPBACK
    )


def secret_destination_problem(name: str, url: str) -> str:
    """Why the secret in `name` may not travel to `url` ("" when it may), saying where it may;
    "" for an empty name or URL (nothing is sent, or the URL's own check reports it)."""
    if not name or not url:
        return ""
    refusal = secret_destinations().refusal(name, url)
    return f"{refusal}." if refusal else ""


def secret_env_read(name: str, url: str = "") -> tuple[str, str]:
    """(the value, the problem): the secret in `name`, stripped, with "" as the problem; or ""
    with the reason there is none (the name is refused, the variable is not set, or it may not
    be sent to `url`, when one is given)."""
    problem = secret_env_problem(name) or secret_destination_problem(name, url)
    if problem:
        return "", problem
    value = os.environ.get(name, "").strip()
    return value, "" if value else f"{name} is not set in this process's environment."


def secret_values() -> tuple[str, ...]:
    """Every secret this process can send: the value of each variable the rule allows, and
    the e-mail server's password. What the scrubber looks for in upstream text, whichever
    provider or channel it came from."""
    refused = platform_env_names()
    prefixes = tuple(prefix for prefix in settings.SECRET_ENV_PREFIXES if prefix)
    names = set(settings.SECRET_ENV_NAMES)
    values = {
        value.strip()
        for name, value in os.environ.items()
        if (name in names or (prefixes and name.startswith(prefixes))) and name not in refused
    }
    values.add(settings.EMAIL_HOST_PASSWORD)
    return tuple(sorted(value for value in values if value))


def secrets_scrubbed(text: str) -> str:
    """`text` (what an outside service answered) with every secret this process can send,
    whole, in pieces or encoded, and anything shaped like a credential, redacted; then cut
    to what an error keeps."""
    return scrub_cut(text, KEPT_LIMIT, secret_values())
