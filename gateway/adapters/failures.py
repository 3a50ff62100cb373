"""Where an upstream failure becomes a `ProviderError`: one per provider, shared by its adapter
and the streams it opens (which know no adapter)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import httpx

from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import Completion
from gateway.engine.scrub import KEPT_LIMIT, scrub_cut
from gateway.engine.secret_watch import secret_watch

# What a failed answer that quoted a secret says (never the secret).
SECRET_QUOTED = "the answer quoted a secret the gateway holds (a provider's key, a channel's token)"


class Failures:
    """Every failure an adapter or its stream raises is made here: the one place upstream text
    becomes an error, so it is scrubbed of this provider's key and anything like a credential
    before the ledger, the logs, the alerts or a page can hold it. An answer that quotes one
    of the same secrets is a failure made here too (`quoted_secret`, and a stream's watch)."""

    __slots__ = ("secrets", "watch")

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(secrets)
        # What its answers are watched for (`engine/secret_watch.py`); None: no secret to watch.
        self.watch = secret_watch(self.secrets)

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

    def quoted_secret(self, completion: Completion) -> ProviderError | None:
        """A whole answer whose text, thinking or tool calls quote a secret, as the failure it
        is (`secret_in_answer`); None for one that quotes none."""
        watch = self.watch
        if watch is None:
            return None
        places = [("its text", completion.text), ("its thinking", completion.reasoning)]
        for call in completion.tool_calls:
            places += [("a tool call", call.name), ("a tool call", call.arguments)]
        for place, text in places:
            if text and watch.found_in(text):
                return self.failed(ErrorClass.SECRET_IN_ANSWER, f"{SECRET_QUOTED}, in {place}")
        return None

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
