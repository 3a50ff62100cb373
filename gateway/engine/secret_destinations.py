"""Where each secret may be sent: a secret variable bound to the places that may receive it.

A provider's key variable and an alert channel's token, webhook URL or HMAC key variable are
names an operator picks; the URL the secret then travels to is another field of the same row.
Without a binding, anyone allowed to edit one row could name another row's secret beside a
server of their own (a provider naming the Telegram bot token, a Telegram channel naming the
OpenAI key, posted to a host of theirs in the path). So every secret variable is declared with
where it may go, in the environment, where the control plane's users can't edit it, and the
URL is checked when a row is saved and again where the secret is sent.

A destination is a scheme, a host and a port: `https://api.openai.com` (the scheme's default
port when none is written: https 443, http 80), `http://10.0.0.5:8000`. Its host is a name,
`*.` and a domain for any name under it (`https://*.openai.azure.com`, not the domain itself),
or an IP address (`http://[::1]:8000`). A URL may carry the secret only when its scheme, host
and port are all one destination's: another listener on the same host gets nothing. A host
written alone (`NAME=host`, the older form) reads as `https://host` on port 443: a secret
travels over TLS unless its entry says otherwise.

The rules here are pure: the settings are passed in as a `SecretDestinations`, the URL as
written.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Where a URL connects when it writes no port.
DEFAULT_PORTS: Mapping[str, int] = {"https": 443, "http": 80}


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a URL connects: its scheme, its host (lower case, IPv6 without brackets) and its
    port (the scheme's default when none is written)."""

    scheme: str
    host: str
    port: int

    @property
    def host_text(self) -> str:
        """The host as a URL writes it (an IPv6 address in brackets)."""
        return f"[{self.host}]" if ":" in self.host else self.host

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host_text}:{self.port}"


@dataclass(frozen=True, slots=True)
class Destination:
    """One place a secret may go: an origin whose host may be `*.domain`. `bare`: written as
    a host alone, the older form, read as https on port 443."""

    origin: Origin
    bare: bool = False

    def admits(self, origin: Origin) -> bool:
        """Whether a URL at `origin` is this destination: same scheme, host and port."""
        place = self.origin
        return (
            origin.scheme == place.scheme
            and origin.port == place.port
            and host_matches(origin.host.rstrip("."), place.host)
        )

    def __str__(self) -> str:
        return str(self.origin)


@dataclass(frozen=True, slots=True)
class SecretDestinations:
    """The destinations each secret variable may be sent to; `loopback`: every secret may also
    go to this machine (the embedded mode's fakes and local models), on any port."""

    hosts: Mapping[str, tuple[Destination, ...]] = field(default_factory=dict)
    loopback: bool = False

    def refusal(self, name: str, url: str) -> str:
        """Why the secret in `name` may not be sent to `url`, or "" when it may. It names the
        URL by its origin alone: a URL may hold a secret in its path (Slack's webhook)."""
        return self.origin_refusal(name, url_origin(url))

    def origin_refusal(self, name: str, origin: Origin | None) -> str:
        """Why the secret in `name` may not be sent to `origin`, or "" when it may."""
        if origin is not None:
            allowed = self.hosts.get(name, ())
            if any(place.admits(origin) for place in allowed) or self._local(origin):
                return ""
        target = str(origin) if origin is not None else "a URL naming no http(s) host and port"
        where = self.where(name)
        if not where:
            return f"{name} may not be sent to {target}: SECRET_DESTINATIONS names nowhere for it"
        return f"{name} may be sent only to {where}, not to {target}"

    def where(self, name: str) -> str:
        """Where `name` may be sent, as a sentence's object ("" when nowhere)."""
        places = [str(place) for place in self.hosts.get(name, ())]
        if self.loopback:
            places.append("this machine (localhost or a loopback IP address, any port)")
        return ", ".join(places)

    def _local(self, origin: Origin) -> bool:
        # Only the name `localhost` itself, as written, and loopback IP addresses: any other
        # name, `*.localhost` ones included, goes to the resolver, which may answer anything.
        if not self.loopback:
            return False
        if origin.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(origin.host).is_loopback
        except ValueError:
            return False


def destinations_parse(entries: Iterable[str]) -> dict[str, tuple[Destination, ...]]:
    """`NAME=destination;destination` entries (SECRET_DESTINATIONS' comma-separated items) as
    a mapping; ValueError naming the entry that isn't one."""
    parsed: dict[str, tuple[Destination, ...]] = {}
    for entry in entries:
        if not entry.strip():
            continue
        name, separator, places = entry.partition("=")
        name = name.strip()
        try:
            found = tuple(destination_parse(place) for place in places.split(";") if place.strip())
        except ValueError as exc:
            raise ValueError(f"{entry.strip()!r}: {exc}") from None
        if not separator or not name or not found:
            raise ValueError(
                f"{entry.strip()!r} is not NAME=destination[;destination…] (a destination is "
                "https://host[:port] or http://host[:port], the host a name, *.domain or an IP "
                "address)"
            )
        parsed[name] = found
    return parsed


def destination_parse(text: str) -> Destination:
    """One destination: `scheme://host[:port]` (a trailing slash allowed, no path), or a host
    alone (the older form, https on 443); ValueError saying what is wrong."""
    text = text.strip()
    scheme, separator, rest = text.partition("://")
    if not separator:
        host = host_normalised(text)
        if not _host_entry_valid(host):
            raise ValueError(
                f"{text!r} is neither scheme://host[:port] nor a host alone (a name, *.domain or "
                "an IP address)"
            )
        return Destination(Origin("https", host, DEFAULT_PORTS["https"]), bare=True)
    scheme = scheme.lower()
    authority = rest[:-1] if rest.endswith("/") else rest
    origin = _origin(scheme, authority) if scheme in DEFAULT_PORTS else None
    if origin is None or any(character in authority for character in "/?#@"):
        raise ValueError(f"{text!r} is not https://host[:port] or http://host[:port]")
    host = origin.host.rstrip(".")
    if not _host_entry_valid(host) or (authority.startswith("[") and ":" not in host):
        raise ValueError(f"{text!r} names no host name, *.domain or IP address")
    return Destination(Origin(scheme, host, origin.port))


def url_origin(url: str) -> Origin | None:
    """Where an http(s) URL connects; None when it names no http(s) host or a port that isn't
    one. The host keeps a trailing dot (`localhost.` is not `localhost` to every resolver)."""
    scheme, separator, rest = url.strip().partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in DEFAULT_PORTS:
        return None
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rpartition("@")[2]
    return _origin(scheme, authority)


def bare_destinations_advice(hosts: Mapping[str, tuple[Destination, ...]]) -> list[str]:
    """For each variable with a destination written as a host alone: how it is read, and the
    form to write instead (one line per variable)."""
    lines = []
    for name, places in hosts.items():
        bare = [place for place in places if place.bare]
        if bare:
            alone = ";".join(place.origin.host_text for place in bare)
            read = ", ".join(str(place) for place in bare)
            instead = ";".join(f"https://{place.origin.host_text}" for place in bare)
            lines.append(
                f"SECRET_DESTINATIONS: {name}={alone} names a host without a scheme or port, "
                f"read as {read}; write {name}={instead} (or the scheme and port it is served "
                "on, e.g. http://host:8000)"
            )
    return lines


def host_normalised(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def host_matches(host: str, entry: str) -> bool:
    """Whether `host` is the entry's host, or lies under its domain for a `*.` entry."""
    if entry.startswith("*."):
        return host.endswith(entry[1:]) and len(host) > len(entry) - 1
    return host == entry


def _origin(scheme: str, authority: str) -> Origin | None:
    if authority.startswith("["):
        host, _, after = authority[1:].partition("]")
        if after and not after.startswith(":"):
            return None
        port_text = after[1:]
    else:
        host, _, port_text = authority.partition(":")
    host = host.strip().lower()
    if not host:
        return None
    if not port_text:
        return Origin(scheme, host, DEFAULT_PORTS[scheme])
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        return None
    return Origin(scheme, host, int(port_text))


def _host_entry_valid(entry: str) -> bool:
    name = entry[2:] if entry.startswith("*.") else entry
    if not name or any(character in name for character in "/:@?#*=[] \t"):
        try:
            ipaddress.ip_address(name)  # an IPv6 address has colons
        except ValueError:
            return False
    return True


# Where the names the demo and the docs use may go: their vendors' API hosts, over TLS.
VENDOR_DESTINATIONS: Mapping[str, tuple[Destination, ...]] = destinations_parse(
    [
        "OPENAI_API_KEY=https://api.openai.com",
        "ANTHROPIC_API_KEY=https://api.anthropic.com",
        "TELEGRAM_BOT_TOKEN=https://api.telegram.org",
        "SLACK_WEBHOOK_URL=https://hooks.slack.com",
    ]
)
