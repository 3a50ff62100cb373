"""Where each secret may be sent: a secret variable bound to the hosts that may receive it.

A provider's key variable and an alert channel's token, webhook URL or HMAC key variable are
names an operator picks; the URL the secret then travels to is another field of the same row.
Without a binding, anyone allowed to edit one row could name another row's secret beside a
server of their own (a provider naming the Telegram bot token, a Telegram channel naming the
OpenAI key, posted to a host of theirs in the path). So every secret variable is declared with
the hosts it may reach, in the environment, where the control plane's users can't edit it, and
the host is checked when a row is saved and again where the secret is sent.

The rules here are pure: the settings are passed in as a `SecretDestinations`, the host as the
URL names it. A host entry is a name (`api.openai.com`), `*.` and a domain for any name under
it (`*.openai.azure.com`, not the domain itself), or an IP address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Where the names the demo and the docs use may go: their vendors' API hosts.
VENDOR_DESTINATIONS: Mapping[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("api.openai.com",),
    "ANTHROPIC_API_KEY": ("api.anthropic.com",),
    "TELEGRAM_BOT_TOKEN": ("api.telegram.org",),
    "SLACK_WEBHOOK_URL": ("hooks.slack.com",),
}


@dataclass(frozen=True, slots=True)
class SecretDestinations:
    """The hosts each secret variable may be sent to; `loopback`: every secret may also go to
    this machine (the embedded mode's fakes and local models)."""

    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    loopback: bool = False

    def refusal(self, name: str, url: str) -> str:
        """Why the secret in `name` may not be sent to `url`, or "" when it may."""
        host = url_host(url)
        allowed = self.hosts.get(name, ())
        if host and (any(host_matches(host, entry) for entry in allowed) or self._local(host)):
            return ""
        return f"{name} may be sent only to {self.where(name)}, not to {host or repr(url)}"

    def where(self, name: str) -> str:
        """The hosts `name` may be sent to, as a sentence's object."""
        places = list(self.hosts.get(name, ()))
        if self.loopback:
            places.append("this machine (loopback)")
        if not places:
            return "no host (SECRET_DESTINATIONS declares none for it)"
        return ", ".join(places)

    def _local(self, host: str) -> bool:
        if not self.loopback:
            return False
        if host == "localhost" or host.endswith(".localhost"):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


def destinations_parse(entries: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """`NAME=host;host` entries (SECRET_DESTINATIONS' comma-separated items) as a mapping;
    ValueError naming the entry that isn't one."""
    parsed: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        if not entry.strip():
            continue
        name, separator, hosts = entry.partition("=")
        name = name.strip()
        found = tuple(host_normalised(host) for host in hosts.split(";") if host.strip())
        if not separator or not name or not found or not all(map(_host_entry_valid, found)):
            raise ValueError(
                f"{entry.strip()!r} is not NAME=host[;host…] (a host name, *.domain or an IP "
                "address, without scheme, port or path)"
            )
        parsed[name] = found
    return parsed


def url_host(url: str) -> str:
    """The host a URL names, normalised (lower case, no trailing dot, IPv6 without brackets);
    "" when it names none."""
    _, separator, rest = url.strip().partition("://")
    if not separator:
        return ""
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rpartition("@")[2]
    if authority.startswith("["):
        return host_normalised(authority[1:].partition("]")[0])
    return host_normalised(authority.partition(":")[0])


def host_normalised(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def host_matches(host: str, entry: str) -> bool:
    """Whether `host` is the entry's host, or lies under its domain for a `*.` entry."""
    if entry.startswith("*."):
        return host.endswith(entry[1:]) and len(host) > len(entry) - 1
    return host == entry


def _host_entry_valid(entry: str) -> bool:
    name = entry[2:] if entry.startswith("*.") else entry
    if not name or any(character in name for character in "/:@?#*= \t"):
        try:
            ipaddress.ip_address(name)  # an IPv6 address has colons
        except ValueError:
            return False
    return True
