"""Where an upstream failure becomes a `ProviderError`: one per provider, shared by its adapter
and the streams it opens (which know no adapter)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import httpx

from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.engine.scrub import KEPT_LIMIT, scrub_cut


class Failures:
    """Every failure an adapter or its stream raises is made here: the one place upstream text
    becomes an error, so it is scrubbed of this provider's key and anything like a credential
    before the ledger, the logs, the alerts or a page can hold it."""

    __slots__ = ("secrets",)

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(secrets)

    def failed(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> ProviderError:
        message = scrub_cut(message, KEPT_LIMIT, self.secrets)
        return ProviderError(error_class, message, status=status, retry_after_s=retry_after_s)

    def malformed(self, what: str) -> ProviderError:
        return self.failed(ErrorClass.MALFORMED, f"unexpected answer: {what}")

    @contextmanager
    def classified(self, timeout_message: str) -> Iterator[None]:
        """Transport failures as the error table's classes."""
        try:
            yield
        except TimeoutError as exc:
            raise self.failed(ErrorClass.TIMEOUT, timeout_message) from exc
        except httpx.TimeoutException as exc:
            raise self.failed(ErrorClass.TIMEOUT, f"timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise self.failed(ErrorClass.REFUSED, f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:  # e.g. a body that doesn't decode as its encoding says
            raise self.failed(ErrorClass.MALFORMED, f"{type(exc).__name__}: {exc}") from exc
