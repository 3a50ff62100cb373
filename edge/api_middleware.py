"""The API's request path: its middleware chain (`settings.API_MIDDLEWARE`) around the URL
resolver and the view, kept on the event loop and built only from Django's public pieces (the
documented middleware factory protocol and its hooks, `MiddlewareMixin`, `MiddlewareNotUsed`,
`import_string`; `django.urls`' resolver, whose match for a path is kept).

Under an async handler Django runs a `MiddlewareMixin` middleware (SecurityMiddleware, and most
of Django's own) by sending its `process_request` and its `process_response` each to a thread:
two thread hops a request for each one, all onto one shared thread when, as on the API, no
request context keeps them apart. The API's middlewares do no blocking I/O (the ORM would raise
`SynchronousOnlyOperation` on the loop), so here their hooks are called on the loop directly. A
natively async middleware (django-cors-headers') is used as it is; one that can only run sync,
or that would render templates, is refused at start-up.

An exception raised in a middleware or the view becomes the endpoint's own JSON answer where it
was raised (`errors`), as Django turns one into a response at each layer: 404, 403 and 400 for
Django's own `Http404`, `PermissionDenied` and `BadRequest`/`SuspiciousOperation`, a logged 500
for anything else.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.exceptions import (
    BadRequest,
    ImproperlyConfigured,
    MiddlewareNotUsed,
    PermissionDenied,
    SuspiciousOperation,
)
from django.core.signals import got_request_exception
from django.http import Http404, HttpRequest, HttpResponseBase
from django.urls import ResolverMatch, URLResolver, get_resolver
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string

logger = logging.getLogger("django.request")
_LOGGED = "api_answer_logged"  # set on an answer once it is logged

Handler = Callable[[HttpRequest], Awaitable[HttpResponseBase]]
# The endpoint's error answer: (request, HTTP status, error code, message) → response.
Errors = Callable[[HttpRequest, int, str, str], HttpResponseBase]
ViewHook = Callable[..., Awaitable[HttpResponseBase | None]]
ExceptionHook = Callable[[HttpRequest, Exception], Awaitable[HttpResponseBase | None]]


@dataclass
class _Hooks:
    """The middlewares' view and exception hooks, in the order Django calls them."""

    view: list[ViewHook] = field(default_factory=list)
    exception: list[ExceptionHook] = field(default_factory=list)


def api_chain(
    *, paths: Sequence[str], inner: Callable[[Handler], Handler], errors: Errors
) -> Handler:
    """The chain of `paths`, the first path outermost, around `inner(view)`, where the view
    resolves the request's path and calls its view function (with the middlewares' view hooks
    before it and their exception hooks on its failure)."""
    hooks = _Hooks()
    middlewares: list[tuple[str, Any]] = [(path, import_string(path)) for path in paths]
    chain = _answering(inner(_answering(_resolving(hooks), errors)), errors)
    for path, middleware in reversed(middlewares):
        if not getattr(middleware, "async_capable", False):
            raise ImproperlyConfigured(
                f"API_MIDDLEWARE: {path} is not async-capable, and the API's requests stay on "
                "the event loop."
            )
        try:
            instance = middleware(chain)
        except MiddlewareNotUsed:
            continue
        if instance is None:
            raise ImproperlyConfigured(f"API_MIDDLEWARE: {path} returned None.")
        if hasattr(instance, "process_template_response"):
            raise ImproperlyConfigured(
                f"API_MIDDLEWARE: {path} has process_template_response; the API renders no "
                "templates."
            )
        if _hooks_only(instance):
            layer = _on_the_loop(instance, chain)
        elif iscoroutinefunction(instance):
            layer = instance
        else:
            raise ImproperlyConfigured(
                f"API_MIDDLEWARE: {path} did not take the async path (its instance is not a "
                "coroutine function)."
            )
        if hasattr(instance, "process_view"):
            hooks.view.insert(0, _awaitable(instance.process_view))
        if hasattr(instance, "process_exception"):
            # Run as Django runs them: synchronously, in a thread (on the error path only).
            hooks.exception.append(sync_to_async(instance.process_exception))
        chain = _answering(layer, errors)
    return chain


@functools.lru_cache(maxsize=512)
def _resolved(resolver: URLResolver, path: str) -> ResolverMatch:
    """`resolver.resolve(path)`, kept: the few paths the API answers on are resolved once, not
    by walking the URL patterns on every request. Keyed by the resolver too, which Django makes
    anew when the URL configuration changes; a path that resolves to nothing raises each time,
    and is not kept."""
    return resolver.resolve(path)


def _resolving(hooks: _Hooks) -> Handler:
    async def view(request: HttpRequest) -> HttpResponseBase:
        # What `django.urls.resolve` does, with the match kept by path. (The context's URL
        # configuration, `get_urlconf()`, is only ever set by Django's own handler, never on
        # this path: a middleware's `request.urlconf`, or ROOT_URLCONF.)
        resolver = get_resolver(getattr(request, "urlconf", None))
        match = _resolved(resolver, request.path_info)
        request.resolver_match = match
        for hook in hooks.view:
            response = await hook(request, match.func, match.args, match.kwargs)
            if response is not None:
                return response
        function = match.func
        if not iscoroutinefunction(function):
            function = sync_to_async(function)
        try:
            response = await function(request, *match.args, **match.kwargs)
        except Exception as exc:
            for hook in hooks.exception:
                answer = await hook(request, exc)
                if answer is not None:
                    return answer
            raise
        if response is None:
            raise ValueError(f"The view {match.view_name or match.func!r} returned None.")
        return response

    return view


def _answering(layer: Handler, errors: Errors) -> Handler:
    """`layer`, with an exception it raises turned into the endpoint's error answer."""

    async def answering(request: HttpRequest) -> HttpResponseBase:
        try:
            return await layer(request)
        except Exception as exc:
            return _answer_for(request, exc, errors)

    return answering


def _answer_for(request: HttpRequest, exc: Exception, errors: Errors) -> HttpResponseBase:
    if isinstance(exc, Http404):
        return errors(request, 404, "not_found", "No such endpoint.")
    if isinstance(exc, PermissionDenied):
        return errors(request, 403, "forbidden", "Not allowed.")
    if isinstance(exc, BadRequest | SuspiciousOperation):
        return errors(request, 400, "bad_request", "The request could not be read.")
    got_request_exception.send(sender=None, request=request)
    answer = errors(request, 500, "internal_error", "The gateway failed to answer this request.")
    log_answer(request, answer, exc)
    return answer


def log_answer(
    request: HttpRequest, response: HttpResponseBase, exc: Exception | None = None
) -> None:
    """What Django logs of an answer of 400 or more, on `django.request`: a warning for a
    refusal, an error (with its exception) for a failure; each answer once."""
    if response.status_code < 400 or getattr(response, _LOGGED, False):
        return
    setattr(response, _LOGGED, True)
    logger.log(
        logging.ERROR if response.status_code >= 500 else logging.WARNING,
        "%s: %s",
        response.reason_phrase,
        request.path.encode("unicode_escape").decode("ascii"),
        exc_info=exc,
        extra={"status_code": response.status_code, "request": request},
    )


def _hooks_only(instance: object) -> bool:
    """A `MiddlewareMixin` that keeps the mixin's own calling code: nothing but its hooks."""
    kind = type(instance)
    return (
        isinstance(instance, MiddlewareMixin)
        and kind.__call__ is MiddlewareMixin.__call__
        and kind.__acall__ is MiddlewareMixin.__acall__  # type: ignore[attr-defined]
    )


def _on_the_loop(instance: Any, get_response: Handler) -> Handler:
    """What `MiddlewareMixin.__acall__` does, without sending each hook to a thread."""
    process_request = getattr(instance, "process_request", None)
    process_response = getattr(instance, "process_response", None)

    async def middleware(request: HttpRequest) -> HttpResponseBase:
        response = process_request(request) if process_request is not None else None
        if response is None:
            response = await get_response(request)
        if process_response is not None:
            response = process_response(request, response)
        return response

    return middleware


def _awaitable(method: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    if iscoroutinefunction(method):
        return method

    async def on_the_loop(*args: Any) -> Any:
        return method(*args)

    return on_the_loop
