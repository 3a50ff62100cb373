"""`GET /` says what is running and links to everything a browser can open, each link answering;
`GET /docs/api/` is the OpenAPI document as HTML, every operation and field of it. Both are
pages (the full stack, the pages' Content-Security-Policy, no script), never leak a secret and
take GET and HEAD only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from importlib import metadata

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.contrib.staticfiles import finders
from django.db import connections
from django.templatetags.static import static

from edge.api.openapi import openapi_document
from edge.front_door import deployment_read, version
from runtime.gateway import Gateway, make_store
from tests.serving import handed

# Most tests here read no database and no shared state; the one that follows every link
# (/readyz, /metrics) gets the database and a gateway of its own.
pure = pytest.mark.backend_free

LINKED = {"/admin/", "/docs/api/", "/api/openapi.json", "/healthz", "/readyz", "/metrics"}
SECRETS = {
    "SECRET_KEY": "front-door-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "database password": "front-door-db-password-9f8e7d",
    "database host": "db.front-door.internal",
    "database user": "front-door-db-user",
    "Redis password": "front-door-redis-password-5a4b",
    "Redis host": "cache.front-door.internal",
    "METRICS_TOKEN": "front-door-metrics-token-0123456789abcdef",
}
PRODUCTION = {
    "DEBUG": False,
    "SECRET_KEY": SECRETS["SECRET_KEY"],
    "DATABASES": {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "failover",
            "USER": SECRETS["database user"],
            "PASSWORD": SECRETS["database password"],
            "HOST": SECRETS["database host"],
            "PORT": "5432",
        }
    },
    "REDIS_URL": f"redis://:{SECRETS['Redis password']}@{SECRETS['Redis host']}:6379/0",
    "STATE_BACKEND": "redis",
    "METRICS_TOKEN": SECRETS["METRICS_TOKEN"],
}
# Overriding DATABASES changes what the page reads, not the connections (which keep theirs).
overrides_databases = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    def descendants(self) -> Iterator[Element]:
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.descendants()

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def by_id(self, element_id: str) -> Element:
        return next(e for e in self.descendants() if e.attrs.get("id") == element_id)

    def having_class(self, name: str) -> list[Element]:
        return [e for e in self.descendants() if name in e.attrs.get("class", "").split()]


class _Tree(HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}

    def __init__(self) -> None:
        super().__init__()
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.open[-1].children.append(element)
        if tag not in self.VOID:
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        assert self.open[-1].tag == tag, f"</{tag}> closes <{self.open[-1].tag}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def parse(html: str) -> Element:
    """The page as a tree; a tag closed out of order fails the test."""
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert tree.open == [tree.root], "unclosed " + ", ".join(e.tag for e in tree.open[1:])
    return tree.root


def hrefs(page: Element) -> set[str]:
    return {e.attrs["href"] for e in page.descendants() if e.tag == "a"}


@pytest.fixture
async def pages() -> AsyncIterator[httpx.AsyncClient]:
    """The ASGI application every serving process runs, so a page is routed as for real."""
    # The module sets Django up as it is imported: only once the test runs, as the other tests
    # of the ASGI application import it.
    from failover_site.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


@pytest.fixture
async def platform(transactional_db) -> AsyncIterator[httpx.AsyncClient]:
    """The same, with the database and a gateway of the test's own (what /metrics reads)."""
    from failover_site.asgi import application

    gateway = Gateway(store=make_store())
    transport = httpx.ASGITransport(app=handed(application, gateway))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client
    finally:
        await gateway.aclose()
        # The ORM ran in asgiref's worker thread: its connection is closed there.
        await sync_to_async(connections.close_all)()


# The front page -------------------------------------------------------------------------------


@pure
async def test_the_front_page_says_what_runs_its_version_and_its_mode(pages, settings):
    settings.DEBUG, settings.STATE_BACKEND = True, "memory"
    response = await pages.get("/")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    page = parse(response.text)
    assert "AI failover gateway" in next(e.text() for e in page.descendants() if e.tag == "h1")
    assert page.by_id("version").text() == metadata.version("failover-platform") == version()
    assert page.by_id("mode").text() == "embedded"
    assert f"({deployment_read().database}, in-process state)" in page.by_id("running").text()


@pure
@overrides_databases
def test_the_mode_is_read_from_the_settings(settings):
    settings.DEBUG, settings.STATE_BACKEND = True, "memory"
    settings.DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}}
    embedded = deployment_read()
    assert (embedded.mode, embedded.database, embedded.state) == (
        "embedded",
        "SQLite",
        "in-process state",
    )
    for name, value in PRODUCTION.items():
        setattr(settings, name, value)
    production = deployment_read()
    assert (production.mode, production.database, production.state) == (
        "production",
        "PostgreSQL",
        "Redis",
    )
    # DEBUG off is a production deployment whatever holds the state (as `bootstrap` says).
    settings.STATE_BACKEND = "memory"
    assert deployment_read().mode == "production"


@pure
async def test_the_front_page_links_the_admin_the_api_the_probes_and_the_metrics(pages):
    page = parse((await pages.get("/")).text)
    assert hrefs(page) >= LINKED
    links = {e.attrs["rel"]: e.attrs["href"] for e in page.descendants() if e.tag == "link"}
    assert links == {"stylesheet": static("front/front.css"), "icon": static("favicon.svg")}
    assert finders.find("front/front.css") is not None and finders.find("favicon.svg") is not None


async def test_every_link_on_the_front_page_answers(platform, settings):
    # /metrics lets this client in by its address (the ASGI transport's 127.0.0.1).
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_IPS = "", ["127.0.0.1"]
    page = parse((await platform.get("/")).text)
    local = {href for href in hrefs(page) if href.startswith("/")}
    assert local == LINKED
    for href in sorted(local):
        response = await platform.get(href)
        if href == "/admin/":
            assert response.status_code == 302, href
            assert response.headers["Location"] == "/admin/login/?next=/admin/"
        else:
            assert response.status_code == 200, (href, response.text[:300])
    # A browser that asks the old place for the icon is sent to the one the pages name.
    icon = await platform.get("/favicon.ico")
    assert icon.status_code == 302 and icon.headers["Location"] == static("favicon.svg")
    if settings.SERVE_STATIC:
        stylesheet = await platform.get(static("front/front.css"))
        assert stylesheet.status_code == 200
        assert stylesheet.headers["Content-Type"].startswith("text/css")
        svg = await platform.get(static("favicon.svg"))
        assert svg.status_code == 200 and svg.headers["Content-Type"] == "image/svg+xml"


@pure
@overrides_databases
async def test_neither_page_shows_a_secret_a_url_or_a_host(pages, settings):
    for name, value in PRODUCTION.items():
        setattr(settings, name, value)
    settings.ALLOWED_HOSTS = ["localhost"]
    front = await pages.get("/")
    reference = await pages.get("/docs/api/")
    assert (front.status_code, reference.status_code) == (200, 200)
    assert parse(front.text).by_id("mode").text() == "production"
    assert "(PostgreSQL, Redis)" in front.text
    for response in (front, reference):
        leaked = {name for name, secret in SECRETS.items() if secret in response.text}
        assert leaked == set()
        assert "redis://" not in response.text
        assert "postgres" not in response.text.replace("PostgreSQL", "")


# The API reference ----------------------------------------------------------------------------


@pure
async def test_the_reference_lists_every_path_and_method_of_the_document(pages):
    document = (await pages.get("/api/openapi.json")).json()
    assert document == openapi_document()
    page = parse((await pages.get("/docs/api/")).text)
    operations = page.having_class("operation")
    listed = [(e.attrs["data-method"], e.attrs["data-path"]) for e in operations]
    expected = [(method, path) for path, methods in document["paths"].items() for method in methods]
    assert sorted(listed) == sorted(expected)
    assert len(set(listed)) == len(listed)
    contents = hrefs(page.by_id("contents"))
    ids = {e.attrs["id"] for e in page.descendants() if "id" in e.attrs}
    for element in operations:
        operation = document["paths"][element.attrs["data-path"]][element.attrs["data-method"]]
        assert f"#{element.attrs['id']}" in contents
        assert " ".join(operation["summary"].split()) in " ".join(element.text().split())
        for status in operation["responses"]:
            assert f"{element.attrs['id']}-{status}" in ids, (operation["operationId"], status)


@pure
async def test_the_reference_renders_a_schemas_fields_with_their_types_and_values(pages):
    schema = openapi_document()["components"]["schemas"]["CompleteRequest"]
    page = parse((await pages.get("/docs/api/")).text)
    section = page.by_id("schema-CompleteRequest")
    fields = {
        name.text(): name_row
        for name_row in section.having_class("field")
        for name in name_row.having_class("field-name")[:1]
    }
    assert set(fields) == set(schema["properties"])
    assert set(schema["required"]) == {"prompt"}
    assert fields["prompt"].having_class("required")
    assert not fields["system_prompt"].having_class("required")
    assert fields["system_prompt"].having_class("type")[0].text() == "string or null"
    assert [v.text() for v in fields["priority"].having_class("value")] == ['"normal"', '"high"']
    assert "The question or instruction." in fields["prompt"].text()
    # A reference to another component is a link to its one rendering on the page.
    answer = page.by_id("op-complete-200")
    assert "#schema-CompleteAnswer" in hrefs(answer)
    assert page.by_id("schema-CompleteAnswer").having_class("field")


@pure
async def test_every_link_inside_the_reference_lands_on_the_page(pages):
    page = parse((await pages.get("/docs/api/")).text)
    ids = {e.attrs["id"] for e in page.descendants() if "id" in e.attrs}
    anchors = {href[1:] for href in hrefs(page) if href.startswith("#")}
    assert anchors
    assert anchors - ids == set()
    schemas = openapi_document()["components"]["schemas"]
    assert {f"schema-{name}" for name in schemas} <= ids


# Both pages ------------------------------------------------------------------------------------


@pure
@pytest.mark.parametrize("path", ["/", "/docs/api/"])
async def test_the_pages_take_get_and_head_only(pages, path):
    assert (await pages.head(path)).status_code == 200
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        # No CSRF token: the 405 comes before the CSRF check's 403.
        response = await pages.request(method, path)
        assert response.status_code == 405, method
        assert response.headers["Allow"] == "GET, HEAD"


@pure
@pytest.mark.parametrize("path", ["/", "/docs/api/"])
async def test_the_pages_keep_to_the_pages_csp_with_no_inline_script_or_style(pages, path):
    response = await pages.get(path)
    policy = response.headers["Content-Security-Policy"]
    # The pages' policy (django-csp), not the API handler's "default-src 'none'".
    assert "default-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe-inline" not in policy
    page = parse(response.text)
    elements = list(page.descendants())
    assert [e for e in elements if e.tag in ("script", "style")] == []
    inline = [e.tag for e in elements if any(a == "style" or a.startswith("on") for a in e.attrs)]
    assert inline == []
    # Nothing from another origin.
    sources = [e.attrs.get("href", "") + e.attrs.get("src", "") for e in elements]
    assert [s for s in sources if s.startswith(("http:", "https:", "//"))] == []
