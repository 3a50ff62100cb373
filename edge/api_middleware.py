"""The API's middleware chain (`settings.API_MIDDLEWARE`), built as Django builds `MIDDLEWARE`
but kept on the event loop.

Under an async handler Django runs a `MiddlewareMixin` middleware (SecurityMiddleware, and most
of Django's own) by sending its `process_request` and its `process_response` each to a thread:
two thread hops a request for each one, all onto one shared thread when, as on the API, no
request context keeps them apart. The API's middlewares do no blocking I/O (the ORM would raise
`SynchronousOnlyOperation` on the loop), so here their hooks are called on the loop directly. A
natively async middleware (django-cors-headers') is used as it is; one that can only run sync
is refused at start-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string

Handler = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


def api_middleware_load(
    *, handler: BaseHandler, get_response: Handler, paths: Sequence[str]
) -> Handler:
    """The chain of `paths` around `get_response`, the first path outermost, as
    `BaseHandler.load_middleware` builds it; the middlewares' view, template-response and
    exception hooks go into `handler`'s lists, where its `_get_response_async` calls them."""
    chain = get_response
    for path in reversed(paths):
        middleware = import_string(path)
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
            handler._view_middleware.insert(0, _awaitable(instance.process_view))  # type: ignore[attr-defined]
        if hasattr(instance, "process_template_response"):
            handler._template_response_middleware.append(  # type: ignore[attr-defined]
                _awaitable(instance.process_template_response)
            )
        if hasattr(instance, "process_exception"):
            # Django runs the exception hooks synchronously (in a thread, on the error path
            # only), as it does for MIDDLEWARE.
            handler._exception_middleware.append(  # type: ignore[attr-defined]
                handler.adapt_method_mode(False, instance.process_exception)
            )
        chain = cast(Handler, convert_exception_to_response(layer))
    return chain


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
