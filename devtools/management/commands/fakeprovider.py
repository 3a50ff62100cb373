"""Serve the fake provider in the foreground, for failover drills and benchmarks.

    python manage.py fakeprovider --port 11434 --model llama3.1:8b --mode slow --delay-ms 3000

Faults can be changed while it runs: POST /_control/fault, GET /_control/stats,
POST /_control/reset (back to the options given here), POST /_control/refuse {"for_ms": N}
(connections refused for N ms). Needs no database.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.fake_provider import (
    DEFAULT_MODELS,
    MODES,
    ConfigError,
    FakeConfig,
    FakeProviderApp,
    FakeProviderServer,
    FakeState,
    bind_socket,
    uvicorn_config,
)


class Command(BaseCommand):
    help = "Serve a fake Ollama-, OpenAI- and Anthropic-compatible provider with switchable faults."
    # No system checks and no migrations check: the command must run without a database.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--port", type=int, default=11434, help="Default 11434, Ollama's; 0 picks a free one."
        )
        parser.add_argument(
            "--model",
            dest="models",
            action="append",
            metavar="NAME",
            help=f"A model to serve (repeatable). Default: {', '.join(DEFAULT_MODELS)}.",
        )
        parser.add_argument(
            "--api-key",
            help="Require this key on every endpoint (a bearer token, or x-api-key for Anthropic).",
        )
        parser.add_argument("--text", help="The answer's text.")
        parser.add_argument("--mode", choices=MODES, help="The fault to start with (default ok).")
        parser.add_argument(
            "--delay-ms",
            type=int,
            help="For slow and cut_stream; for stall, the wait before a stream's first chunk.",
        )
        parser.add_argument(
            "--jitter-ms", type=int, help="For slow and stall: each wait is delay ± this."
        )
        parser.add_argument("--chunk-delay-ms", type=int, help="The wait between stream chunks.")
        parser.add_argument(
            "--after-chunks",
            type=int,
            help="For stall and stream_error: the pause or the error after this many chunks.",
        )
        parser.add_argument(
            "--cut-after-bytes", type=int, help="For cut_stream: drop after this many body bytes."
        )
        parser.add_argument("--status", type=int, help="For error (default 500).")
        parser.add_argument("--retry-after", help="For rate_limit: the Retry-After header.")
        parser.add_argument("--error-rate", type=float, help="Share of chat calls failing, 0..1.")
        parser.add_argument("--scope", choices=("chat", "all"), help="Which endpoints fail.")

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        fields = (
            *("models", "api_key", "text", "mode", "delay_ms", "jitter_ms", "chunk_delay_ms"),
            *("after_chunks", "cut_after_bytes"),
            *("status", "retry_after", "error_rate", "scope"),
        )
        changes = {name: options[name] for name in fields if options.get(name) is not None}
        try:
            config = FakeConfig().updated(changes)
        except ConfigError as exc:
            raise CommandError(f"--{exc.field.replace('_', '-')}: {exc.message}") from exc
        try:
            sock = bind_socket(host, port)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from exc
        port = sock.getsockname()[1]
        server = FakeProviderServer(uvicorn_config(FakeProviderApp(FakeState(config))))
        self.stdout.write(
            f"Fake provider on http://{host}:{port} (models: {', '.join(config.models)}; "
            f"mode: {config.mode}). Control: POST /_control/fault. Quit with CTRL-C."
        )
        self.stdout.flush()
        server.run_until_stopped(sock)
