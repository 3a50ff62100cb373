"""The error table as code: Retry-After parsing, HTTP status classification, and each error
class's row against the error table of docs/architecture.md."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from email.utils import formatdate

import pytest

from gateway.adapters.errors import (
    ERROR_TABLE,
    MAX_RETRY_AFTER_S,
    ErrorClass,
    ProviderError,
    classify_status,
    parse_retry_after,
)

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = pytest.mark.backend_free

NOW = 1_800_000_000.0


def http_date(epoch: float) -> str:
    return formatdate(epoch, usegmt=True)


@pytest.fixture
def local_zone_far_from_utc() -> Iterator[None]:
    """The process's local zone set away from UTC (Django sets TZ from TIME_ZONE)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


class TestParseRetryAfter:
    def test_it_reads_delta_seconds(self):
        assert parse_retry_after("7", now_epoch=NOW) == 7.0

    def test_it_reads_fractional_seconds(self):
        assert parse_retry_after("1.5", now_epoch=NOW) == 1.5

    def test_it_ignores_surrounding_whitespace(self):
        assert parse_retry_after("  12 ", now_epoch=NOW) == 12.0

    def test_it_turns_negative_seconds_into_zero(self):
        assert parse_retry_after("-5", now_epoch=NOW) == 0.0

    def test_it_reads_an_http_date_in_the_future_as_the_seconds_until_then(self):
        assert parse_retry_after(http_date(NOW + 30), now_epoch=NOW) == 30.0

    @pytest.mark.usefixtures("local_zone_far_from_utc")
    def test_it_reads_the_obsolete_asctime_date_as_gmt_whatever_the_local_zone(self):
        # 1_800_000_000 is Fri Jan 15 08:00:00 2027 UTC.
        assert parse_retry_after("Fri Jan 15 08:00:30 2027", now_epoch=NOW) == 30.0

    @pytest.mark.usefixtures("local_zone_far_from_utc")
    def test_it_reads_the_obsolete_rfc_850_date(self):
        assert parse_retry_after("Friday, 15-Jan-27 08:00:30 GMT", now_epoch=NOW) == 30.0

    def test_it_turns_an_http_date_in_the_past_into_zero(self):
        assert parse_retry_after(http_date(NOW - 600), now_epoch=NOW) == 0.0

    @pytest.mark.parametrize("value", ["soon", "Tuesday", "7 seconds", "nan", "Mon, 99 Foo"])
    def test_it_returns_none_for_garbage(self, value):
        assert parse_retry_after(value, now_epoch=NOW) is None

    @pytest.mark.parametrize("value", [None, "", "   "])
    def test_it_returns_none_when_there_is_no_header(self, value):
        assert parse_retry_after(value, now_epoch=NOW) is None

    def test_it_caps_huge_seconds_at_the_maximum(self):
        assert parse_retry_after("999999999", now_epoch=NOW) == MAX_RETRY_AFTER_S

    def test_it_caps_a_far_future_date_at_the_maximum(self):
        assert parse_retry_after(http_date(NOW + 86_400 * 30), now_epoch=NOW) == MAX_RETRY_AFTER_S


class TestClassifyStatus:
    def test_a_plain_400_is_the_clients_error(self):
        assert classify_status(400, "Invalid request: temperature must be <= 2") == (
            ErrorClass.CLIENT_ERROR
        )

    @pytest.mark.parametrize(
        "message",
        [
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. context_length_exceeded",
            "context_length_exceeded",
            "input length exceeds the context length",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "Too many tokens in the request",
            "The input exceeds the model's context window",
        ],
    )
    def test_a_400_about_the_context_length_is_context_too_long(self, message):
        assert classify_status(400, message) == ErrorClass.CONTEXT_TOO_LONG

    def test_the_context_wording_is_matched_whatever_its_case(self):
        assert classify_status(400, "Maximum Context Length exceeded") == (
            ErrorClass.CONTEXT_TOO_LONG
        )

    @pytest.mark.parametrize("status", [401, 403])
    def test_401_and_403_are_our_credentials(self, status):
        assert classify_status(status, "Incorrect API key provided") == ErrorClass.AUTH

    def test_a_404_is_rejected_upstream_as_our_configuration(self):
        assert classify_status(404, "model 'x' not found") == ErrorClass.UPSTREAM_REJECTED

    def test_a_405_is_rejected_upstream_as_our_configuration(self):
        assert classify_status(405, "method not allowed") == ErrorClass.UPSTREAM_REJECTED

    def test_a_413_about_the_context_length_is_context_too_long(self):
        assert classify_status(413, "prompt is too long") == ErrorClass.CONTEXT_TOO_LONG

    def test_a_plain_413_is_rejected_upstream(self):
        assert classify_status(413, "Request Entity Too Large") == ErrorClass.UPSTREAM_REJECTED

    def test_a_plain_422_is_the_clients_error(self):
        assert classify_status(422, "messages: field required") == ErrorClass.CLIENT_ERROR

    def test_a_422_about_the_context_length_is_context_too_long(self):
        assert classify_status(422, "context_length_exceeded") == ErrorClass.CONTEXT_TOO_LONG

    def test_a_429_is_rate_limited(self):
        assert classify_status(429, "Rate limit reached") == ErrorClass.RATE_LIMITED

    @pytest.mark.parametrize("status", [500, 502, 503])
    def test_5xx_is_a_server_error(self, status):
        assert classify_status(status, "") == ErrorClass.SERVER_ERROR

    def test_a_5xx_mentioning_the_context_is_still_a_server_error(self):
        assert classify_status(500, "context length") == ErrorClass.SERVER_ERROR


class TestErrorTable:
    def test_every_error_class_has_a_row(self):
        assert set(ERROR_TABLE) == set(ErrorClass)

    @pytest.mark.parametrize(
        "error_class",
        [ErrorClass.REFUSED, ErrorClass.SERVER_ERROR, ErrorClass.MALFORMED],
    )
    def test_transport_server_and_body_failures_try_next_and_count_against_the_breaker(
        self, error_class
    ):
        rule = ERROR_TABLE[error_class]
        assert rule.try_next
        assert rule.breaker_failure
        assert not rule.slow_call
        assert not rule.opens_breaker
        assert not rule.cool_down

    def test_a_timeout_tries_next_and_counts_as_a_failure_and_a_slow_call(self):
        rule = ERROR_TABLE[ErrorClass.TIMEOUT]
        assert rule.try_next
        assert rule.breaker_failure
        assert rule.slow_call

    def test_rate_limited_cools_the_provider_down_without_a_breaker_failure(self):
        rule = ERROR_TABLE[ErrorClass.RATE_LIMITED]
        assert rule.try_next
        assert rule.cool_down
        assert not rule.breaker_failure
        assert not rule.opens_breaker

    def test_auth_opens_the_breaker_and_alerts_on_credentials(self):
        rule = ERROR_TABLE[ErrorClass.AUTH]
        assert rule.try_next
        assert rule.opens_breaker
        assert rule.breaker_failure
        assert rule.alert == "credentials"

    def test_context_too_long_goes_only_to_larger_contexts_without_a_breaker_failure(self):
        rule = ERROR_TABLE[ErrorClass.CONTEXT_TOO_LONG]
        assert rule.try_next
        assert rule.larger_context_only
        assert not rule.breaker_failure

    def test_a_client_error_goes_back_to_the_client_and_spares_the_breaker(self):
        rule = ERROR_TABLE[ErrorClass.CLIENT_ERROR]
        assert not rule.try_next
        assert not rule.breaker_failure
        assert not rule.opens_breaker
        assert not rule.cool_down

    def test_only_context_too_long_is_limited_to_larger_contexts(self):
        limited = {cls for cls, rule in ERROR_TABLE.items() if rule.larger_context_only}
        assert limited == {ErrorClass.CONTEXT_TOO_LONG}

    def test_only_auth_opens_the_breaker_at_once(self):
        assert {cls for cls, rule in ERROR_TABLE.items() if rule.opens_breaker} == {ErrorClass.AUTH}

    def test_a_provider_error_carries_its_rule(self):
        error = ProviderError(ErrorClass.RATE_LIMITED, "slow down", status=429, retry_after_s=7)
        assert error.rule is ERROR_TABLE[ErrorClass.RATE_LIMITED]
        assert (error.status, error.retry_after_s, str(error)) == (429, 7, "slow down")
