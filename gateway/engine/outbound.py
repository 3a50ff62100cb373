"""Where the gateway may send a request: the outbound URL policy, as pure rules.

Every URL an operator enters (a provider's base URL; an alert channel's webhook, Slack or
Telegram URL) is held to these rules when it is saved and again when it is called, then
against the addresses its host resolves to at that moment (DNS can change in between):

- http:// or https:// only; no user name or password, no query string, no fragment (the
  gateway appends its own paths: a `?x=` would turn them into a query and let the URL name any
  endpoint of the host);
- link-local addresses and the clouds' metadata services: never;
- loopback and private addresses (RFC 1918, CGNAT, IPv6 unique-local …): only when the policy
  allows them (`OUTBOUND_ALLOW`: a self-hosted Ollama needs one of them).

The callers parse and resolve (`providers/models/outbound.py` when saving,
`gateway/adapters/outbound.py` and `alerts/channels/outbound.py` when connecting); these
functions only decide. Each returns why a URL, host or address is refused, or "" when it isn't.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOW_CHOICES = ("loopback", "private")
# How every refusal starts, wherever it is shown (a form, a ledger row, an alert's last error).
BLOCKED = "blocked by the URL policy"

# Instance metadata services hand out credentials to whoever asks from inside the machine.
# Most sit on 169.254.169.254 (link-local, refused anyway); these are the ones that don't, or
# that deserve their own name in the message.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack …
        "169.254.170.2",  # AWS ECS task credentials
        "fd00:ec2::254",  # AWS over IPv6 (inside fc00::/7, which a policy may allow)
        "100.100.100.200",  # Alibaba Cloud (inside CGNAT's 100.64/10)
        "192.0.0.192",  # Oracle Cloud's older endpoint
    )
)
METADATA_HOSTS = frozenset(
    (
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# What a URL can't contain anywhere: parsers disagree about them (a backslash is a slash to a
# browser, not to every HTTP client), which is how one URL reaches two different hosts.
_UNSAFE_CHARACTERS = frozenset(" \t\r\n\\") | {chr(code) for code in range(0x20)} | {"\x7f"}


@dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """Which internal addresses a URL may reach besides the public internet."""

    loopback: bool = False
    private: bool = False

    @classmethod
    def allowing(cls, names: Iterable[str]) -> OutboundPolicy:
        """From `OUTBOUND_ALLOW`'s names; ValueError for a name it doesn't know."""
        allowed = {name.strip().lower() for name in names if name.strip()}
        unknown = allowed - set(ALLOW_CHOICES)
        if unknown:
            raise ValueError(
                f"unknown outbound allowance {', '.join(sorted(unknown))} "
                f"(choose from {', '.join(ALLOW_CHOICES)})"
            )
        return cls(loopback="loopback" in allowed, private="private" in allowed)


def url_refusal(url: str) -> str:
    """What is wrong with the URL's form, whatever it points at."""
    if any(character in _UNSAFE_CHARACTERS for character in url):
        return "a URL can't contain spaces, backslashes or control characters"
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in ("http", "https"):
        return "only http:// and https:// URLs are allowed"
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        return "a URL can't carry a user name or password (keep secrets in the environment)"
    # Even a bare "?" or "#" counts: the gateway's paths would land after it.
    if "?" in url:
        return "a URL can't have a query string (?…)"
    if "#" in url:
        return "a URL can't have a fragment (#…)"
    return ""


def host_refusal(host: str, policy: OutboundPolicy) -> str:
    """Refusal of a host as written: a metadata service's name, or an IP address the policy
    refuses. A name that isn't one is "" here: its addresses decide (`resolved_refusal`)."""
    name = host.strip("[]").rstrip(".").lower()
    if name in METADATA_HOSTS:
        return f"{name} is a cloud metadata service (never allowed)"
    return address_refusal(name, policy) if is_address(name) else ""


def resolved_refusal(host: str, addresses: Iterable[str], policy: OutboundPolicy) -> str:
    """Refusal of a host by the addresses it resolved to: any one refused refuses it (a name
    that mixes public and internal answers is one a rebinding attack would use)."""
    refusal = host_refusal(host, policy)
    if refusal:
        return refusal
    for address in addresses:
        verdict = _verdict(address, policy)
        if verdict:
            return f"{host} resolves to {address}, {verdict}"
    return ""


def allowed_addresses(
    host: str, infos: Iterable[Sequence[Any]], policy: OutboundPolicy
) -> tuple[list[str], str]:
    """What a resolver answered for `host` (`getaddrinfo`'s entries) as the addresses to
    connect to, each once and in its order, with the policy's refusal of them ("" when every
    one may be called). The one rule both outbound guards connect by: the providers' (async)
    and the alert channels' (sync)."""
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    return addresses, resolved_refusal(host, addresses, policy)


def address_refusal(address: str, policy: OutboundPolicy) -> str:
    """Refusal of one IP address under the policy ("" when it may be called)."""
    verdict = _verdict(address, policy)
    return f"{address} is {verdict}" if verdict else ""


_NEVER = "(never allowed)"
_LOOPBACK = "a loopback address (allowed only with OUTBOUND_ALLOW=loopback)"
_PRIVATE = "a private address (allowed only with OUTBOUND_ALLOW=private)"


def _verdict(address: str, policy: OutboundPolicy) -> str:
    try:
        # An IPv6 zone ("%eth0") names the interface, not another address.
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    ip = _embedded_ipv4(parsed) or parsed
    if ip in METADATA_ADDRESSES:
        return f"a cloud metadata address {_NEVER}"
    if ip.is_link_local:
        return f"a link-local address {_NEVER}"
    if ip.is_loopback:
        return "" if policy.loopback else _LOOPBACK
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return f"not a unicast host address {_NEVER}"
    if not ip.is_global or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local):
        return "" if policy.private else _PRIVATE
    return ""


def is_address(name: str) -> bool:
    """Whether `name` is an IP address as written (nothing to resolve)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, NAT64, IPv4-compatible): the
    packets reach that address, so its rules apply."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None
