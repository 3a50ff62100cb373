"""The API's own middleware (API_MIDDLEWARE): the security headers that fit an API, built from
the setting as Django builds MIDDLEWARE, every hook run on the event loop; no HTTPS redirect
for API clients, but a JSON refusal of plain HTTP when API_REQUIRE_HTTPS says so; an exception
in a view or a middleware answered in the endpoint's JSON shape, never Django's HTML page."""

from __future__ import annotations

import logging
import threading

import httpx
import pytest
from asgiref.sync import markcoroutinefunction
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, JsonResponse
from django.test import override_settings
from django.urls import path
from django.utils.deprecation import MiddlewareMixin

from edge.handlers import ApiHandler, CappedASGIHandler

pytestmark = pytest.mark.backend_free

SECURITY = "django.middleware.security.SecurityMiddleware"
HERE = "tests.failover_site.test_api_headers"
calls: list[tuple[str, str, int]] = []


class First(MiddlewareMixin):
    def process_request(self, request):
        calls.append(("first", "request", threading.get_ident()))

    def process_response(self, request, response):
        calls.append(("first", "response", threading.get_ident()))
        response["X-First"] = "1"
        return response


class Second(MiddlewareMixin):
    def process_request(self, request):
        calls.append(("second", "request", threading.get_ident()))

    def process_response(self, request, response):
        calls.append(("second", "response", threading.get_ident()))
        return response


class NativelyAsync:
    sync_capable = False
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request):
        calls.append(("async", "request", threading.get_ident()))
        response = await self.get_response(request)
        response["X-Async"] = "1"
        return response


class SyncOnly:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)


class Refusing(MiddlewareMixin):
    def process_request(self, request):
        if request.path.endswith("/refused"):
            raise PermissionDenied


class ViewHook(MiddlewareMixin):
    def process_view(self, request, view, args, kwargs):
        calls.append(("view", view.__name__, threading.get_ident()))
        if request.path.endswith("/hooked"):
            return JsonResponse({"answered_by": "process_view"})
        return None


class Rendering(MiddlewareMixin):
    def process_template_response(self, request, response):
        return response


async def boom(request):
    raise RuntimeError("the view failed")


async def missing(request):
    raise Http404("nothing here")


async def fine(request):
    return JsonResponse({"ok": True})


urlpatterns = [
    path("api/boom", boom),
    path("v1/boom", boom),
    path("api/missing", missing),
    path("api/hooked", fine),
    path("api/fine", fine),
    path("api/refused", fine),
]


@pytest.fixture(autouse=True)
def _fresh_calls():
    calls.clear()


async def _get(app, url: str, **kwargs) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        return await client.get(url, **kwargs)


async def test_the_api_answers_nosniff_and_a_policy_that_allows_nothing():
    from failover_site.asgi import application

    for url in ("http://localhost/api/nowhere", "http://localhost/v1/nowhere"):
        response = await _get(application, url)
        assert response.status_code == 404
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == (
            "default-src 'none'; frame-ancestors 'none'"
        )
        assert "strict-transport-security" not in response.headers  # plain HTTP: no HSTS


@override_settings(SECURE_HSTS_SECONDS=31_536_000, SECURE_HSTS_INCLUDE_SUBDOMAINS=True)
async def test_over_https_the_api_sends_hsts_as_production_settings_say():
    response = await _get(ApiHandler(), "https://localhost/api/nowhere")
    assert response.headers["strict-transport-security"] == "max-age=31536000; includeSubDomains"


async def test_a_body_refused_as_too_large_carries_the_headers_too():
    from failover_site.asgi import application

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application)) as client:
        response = await client.post("http://localhost/api/v1/complete", content=b"x" * 70_000)
    assert response.status_code == 413
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["connection"] == "close"


@override_settings(SECURE_SSL_REDIRECT=True, API_REQUIRE_HTTPS=False)
async def test_the_api_is_never_redirected_to_https_while_the_pages_are():
    api = await _get(ApiHandler(), "http://localhost/api/nowhere")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"
    assert (await _get(ApiHandler(), "http://localhost/v1/nowhere")).status_code == 404
    page = await _get(CappedASGIHandler(), "http://localhost/admin/login/")
    assert page.status_code == 301
    assert page.headers["location"] == "https://localhost/admin/login/"
    assert (await _get(CappedASGIHandler(), "http://localhost/healthz")).status_code == 200


@override_settings(API_REQUIRE_HTTPS=True)
async def test_with_https_required_plain_http_is_refused_in_each_endpoints_shape():
    handler = ApiHandler()
    gateway_shape = await _get(handler, "http://localhost/api/v1/status")
    assert gateway_shape.status_code == 403
    assert gateway_shape.json()["error"]["code"] == "https_required"
    assert gateway_shape.headers["x-content-type-options"] == "nosniff"
    openai_shape = await _get(handler, "http://localhost/v1/models")
    assert openai_shape.status_code == 403
    assert openai_shape.json()["error"]["code"] == "https_required"
    assert openai_shape.json()["error"]["type"] == "permission_error"
    # Over HTTPS the request goes through to the endpoint.
    assert (await _get(handler, "https://localhost/api/nowhere")).status_code == 404


@override_settings(
    API_REQUIRE_HTTPS=True, SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")
)
async def test_https_terminated_by_a_trusted_proxy_counts_as_https():
    response = await _get(
        ApiHandler(), "http://localhost/api/nowhere", headers={"X-Forwarded-Proto": "https"}
    )
    assert response.status_code == 404


@override_settings(API_MIDDLEWARE=[f"{HERE}.First", f"{HERE}.Second", SECURITY])
async def test_the_chain_runs_in_the_settings_order_on_the_event_loops_thread():
    response = await _get(ApiHandler(), "http://localhost/api/nowhere")
    assert response.headers["x-first"] == "1"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert [(name, hook) for name, hook, _ in calls] == [
        ("first", "request"),
        ("second", "request"),
        ("second", "response"),
        ("first", "response"),
    ]
    # No hook was sent to a thread: each ran where the request did.
    assert {thread for _, _, thread in calls} == {threading.get_ident()}


@override_settings(API_MIDDLEWARE=[f"{HERE}.NativelyAsync", SECURITY])
async def test_a_natively_async_middleware_is_used_as_it_is():
    response = await _get(ApiHandler(), "http://localhost/api/nowhere")
    assert response.headers["x-async"] == "1"
    assert calls == [("async", "request", threading.get_ident())]


def test_a_middleware_that_can_only_run_sync_is_refused_at_start_up():
    with (
        override_settings(API_MIDDLEWARE=[f"{HERE}.SyncOnly"]),
        pytest.raises(ImproperlyConfigured, match="not async-capable"),
    ):
        ApiHandler()


@override_settings(ROOT_URLCONF=HERE)
async def test_a_failing_view_is_a_logged_500_in_each_endpoints_shape(caplog):
    with caplog.at_level(logging.ERROR, logger="django.request"):
        api = await _get(ApiHandler(), "http://localhost/api/boom")
        openai = await _get(ApiHandler(), "http://localhost/v1/boom")
    assert api.status_code == openai.status_code == 500
    assert api.json()["error"]["code"] == "internal_error"
    assert openai.json()["error"]["code"] == "internal_error"
    assert api.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert api.headers["x-content-type-options"] == "nosniff"
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert [r.getMessage() for r in logged] == [
        "Internal Server Error: /api/boom",
        "Internal Server Error: /v1/boom",
    ]
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in logged)


@override_settings(ROOT_URLCONF=HERE, API_MIDDLEWARE=[SECURITY, f"{HERE}.Refusing"])
async def test_django_refusals_raised_anywhere_keep_their_status_as_json():
    missing = await _get(ApiHandler(), "http://localhost/api/missing")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    refused = await _get(ApiHandler(), "http://localhost/api/refused")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert refused.headers["x-content-type-options"] == "nosniff"  # the outer layers still ran


@override_settings(ROOT_URLCONF=HERE, API_MIDDLEWARE=[f"{HERE}.ViewHook", SECURITY])
async def test_a_view_hook_runs_on_the_loop_before_the_view_and_may_answer_for_it():
    assert (await _get(ApiHandler(), "http://localhost/api/fine")).json() == {"ok": True}
    hooked = await _get(ApiHandler(), "http://localhost/api/hooked")
    assert hooked.json() == {"answered_by": "process_view"}
    assert calls == [
        ("view", "fine", threading.get_ident()),
        ("view", "fine", threading.get_ident()),
    ]


def test_a_middleware_that_renders_templates_is_refused_at_start_up():
    with (
        override_settings(API_MIDDLEWARE=[f"{HERE}.Rendering"]),
        pytest.raises(ImproperlyConfigured, match="renders no templates"),
    ):
        ApiHandler()
