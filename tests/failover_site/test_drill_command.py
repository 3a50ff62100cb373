"""`manage.py drill`'s contract without a run: options it refuses and fakes it can't reset exit
2 ("could not be run", never 1, "expectations broken"), SIGTERM ends a drill through its
clean-ups, and the warm-up is a request like the scenario's."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
from django.core.management import CommandError, call_command

from devtools.drill import load
from devtools.drill.runner import TERMINATED_EXIT, sigterm_as_exit
from devtools.fake_provider import FakeProvider
from devtools.ports import free_port

pytestmark = pytest.mark.backend_free


def exit_code(*args: str) -> int:
    with pytest.raises(CommandError) as raised:
        call_command("drill", *args)
    return raised.value.returncode


@pytest.mark.parametrize(
    "options",
    [
        ["--rate", "0"],
        ["--duration", "-1"],
        ["--fault-for", "0"],
        ["--fault-at", "-1"],
        ["--concurrency", "0"],
        ["--policy", "cooldown_s"],
        ["--policy", "no_such_field=1"],
    ],
)
def test_options_the_drill_cannot_run_with_exit_2(options):
    assert exit_code("blackhole", *options) == 2


def test_a_url_without_a_key_exits_2(monkeypatch):
    monkeypatch.delenv("FAILOVER_API_KEY", raising=False)
    assert exit_code("blackhole", "--url", "http://127.0.0.1:9") == 2


def test_an_unreachable_fake_provider_exits_2_with_a_message_not_a_traceback():
    fake = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CommandError) as raised:
        call_command("drill", "blackhole", "--url", "http://127.0.0.1:9", "--key", "k",
                     "--fake-url", fake, "--fake-url", fake)  # fmt: skip
    assert raised.value.returncode == 2
    assert str(raised.value).startswith(f"the primary's fake provider at {fake} did not answer")


def test_a_fake_provider_that_does_not_reset_exits_2():
    with FakeProvider(models=["llama3.1:8b"]) as fake:
        wrong = f"{fake.url}/not-the-fake"  # its /_control/ is not under this path: 404
        with pytest.raises(CommandError) as raised:
            call_command("drill", "blackhole", "--url", "http://127.0.0.1:9", "--key", "k",
                         "--fake-url", wrong, "--fake-url", wrong)  # fmt: skip
    assert raised.value.returncode == 2
    assert "answered its reset with HTTP 404" in str(raised.value)


def test_sigterm_during_a_drill_raises_system_exit_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    cleaned_up = []
    with pytest.raises(SystemExit) as raised, sigterm_as_exit():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted at once by the handler's exception
        finally:
            cleaned_up.append(True)
    assert raised.value.code == TERMINATED_EXIT == 143
    assert cleaned_up == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_sigterm_is_left_alone():
    seen = []

    def drill() -> None:
        with sigterm_as_exit():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=drill)
    thread.start()
    thread.join()
    assert seen == [before]


def test_the_warm_up_of_a_streamed_scenario_is_a_streamed_request():
    with FakeProvider(models=["auto"], text="Hello.") as fake:
        streamed = asyncio.run(load.ask(fake.url, "k", stream=True))
        assert fake.calls_to("/v1/chat/completions") == 1
    # A whole answer would end "without [DONE]": this one came as events, to the last.
    assert (streamed.status, streamed.error, streamed.broken_stream) == (200, "", False)
    assert streamed.ok
