"""The coding-agent CLIs from npm, run through the gateway as their users run them: Claude Code
(`claude -p`) at the Messages door and OpenAI's Codex (`codex exec`) at the Responses door.

Their versions are pinned in `package.json` and `package-lock.json` beside this file; `make
test` installs them from the npm registry (`npm ci --prefix tests/agents`). Without `node` the
tests skip (a skip fails the pass under FAILOVER_REQUIRE_SERVICES=1, as in CI); with `node` but
no install, or another version installed, they fail.

Each run is a subprocess with a home of its own in the test's tmp_path (HOME, XDG dirs,
CODEX_HOME) and a working directory there, given only the environment named here. Each CLI's
telemetry, error reports, update checks and other traffic besides the model's are switched off
with its own switches, and nothing else: whatever changes what a CLI sends to the model (its
betas, its thinking, its tools) stays at its default, which is what these tests are about.
Anything either would still try to reach beyond the loopback goes to a proxy on a closed
loopback port and fails at once, without leaving the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from devtools.ports import free_port
from providers.models import Provider
from runtime.gateway import Gateway
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import (  # noqa: F401 - fixtures the tests here use
    anthropic_only,
    claude,
    clock,
    gateway,
    live_url,
    primary,
    providers_configured,
    secondary,
    update_provider,
)

AGENTS = Path(__file__).resolve().parent
BIN = AGENTS / "node_modules" / ".bin"
PINNED = json.loads((AGENTS / "package.json").read_text())["dependencies"]
CLAUDE_CODE = "@anthropic-ai/claude-code"
CODEX = "@openai/codex"
# A CLI starts, makes two model calls through the gateway and runs a tool in a few seconds; CI
# is a loaded two-core machine running four workers.
TIMEOUT_S = 180.0
# The context window of the models coding agents run on (Claude's 200K). Claude Code asks for
# 32,000 tokens of answer over a prompt of some 20,000 tokens, past the 8,192 a provider's row
# has by default.
AGENT_CONTEXT_WINDOW = 200_000
# The file the tests ask Claude Code to read, and what it holds.
NOTES = "notes.txt"
NOTES_TEXT = "The secret word is pelican."

# Claude Code's own switches for what it sends besides the model's calls: usage metrics,
# Sentry's error reports, the auto-updater, the transcript upload of /bug, the session-quality
# survey, and (the umbrella) every other non-essential request. A capture of what 2.1.332 sends
# found its calls to the model the same with and without each.
CLAUDE_CODE_QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    # Its retries of an error answer (ten, backing off for minutes) would hide a gateway's
    # error until the run's timeout: here a gateway error is the test's failure at once.
    "CLAUDE_CODE_MAX_RETRIES": "0",
}

# Codex's configuration: the gateway as a provider of its own (no retries, as for Claude Code),
# and its own switches for the update check, analytics (the Statsig metrics with it), feedback
# and OpenTelemetry's exports.
# `plugins = false` stops the start-up sync of OpenAI's curated plugins (git and HTTPS to
# github.com and chatgpt.com); offline it installs nothing, and a capture of 0.171.0 found its
# calls to the model the same with the feature on and off.
CODEX_CONFIG = """\
model = "{model}"
model_provider = "failover"
check_for_update_on_startup = false

[model_providers.failover]
name = "Failover gateway"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "FAILOVER_KEY"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
"""


@dataclass(frozen=True)
class AgentRun:
    """One finished run of a CLI: what it printed and how it exited."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines it printed (`--output-format stream-json`, `--json`)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def __str__(self) -> str:
        return (
            f"{' '.join(self.argv[:2])} ... exited {self.returncode}\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


@dataclass(frozen=True)
class AgentHome:
    """A run's private directories: its home (HOME, the XDG dirs, CODEX_HOME under it) and
    the working directory it starts in, which holds `NOTES`."""

    home: Path
    work: Path

    @classmethod
    def made_in(cls, root: Path) -> AgentHome:
        home, work = root / "home", root / "work"
        for directory in (home, work, home / ".config", home / ".cache", home / "tmp"):
            directory.mkdir(parents=True, exist_ok=True)
        (work / NOTES).write_text(NOTES_TEXT + "\n")
        return cls(home=home, work=work)

    def environment(self, closed_port: int, **extra: str) -> dict[str, str]:
        """A CLI's whole environment: nothing of the test process's own (no key, proxy or
        setting of the developer's reaches it) but PATH and the locale."""
        nowhere = f"http://127.0.0.1:{closed_port}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
        proxies = dict.fromkeys(names, nowhere)
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "TMPDIR": str(self.home / "tmp"),
            **proxies,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            **extra,
        }


def pinned_cli(command: str, package: str, home: AgentHome) -> Path:
    """The CLI `command` of `package` from this directory's install, checked to be the version
    package.json pins: a skip without node, a failure without the install or with another
    version (a stale node_modules)."""
    if shutil.which("node") is None:
        pytest.skip("no node on PATH: the coding-agent CLIs can't be installed or run")
    executable = BIN / command
    if not executable.exists():
        pytest.fail(
            f"{executable} is missing: install the pinned CLIs with `npm ci --prefix "
            "tests/agents` (make test does)"
        )
    shown = subprocess.run(
        [executable, "--version"],
        cwd=home.work,
        env=home.environment(free_port()),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    version = PINNED[package]
    if shown.returncode != 0 or version not in shown.stdout.split():
        pytest.fail(
            f"{executable} --version says {shown.stdout.strip() or shown.stderr.strip()!r}, "
            f"not {package} {version}: run `npm ci --prefix tests/agents`"
        )
    return executable


async def run_cli(argv: list[str], *, cwd: Path, env: dict[str, str]) -> AgentRun:
    """`argv` run to its end in `cwd` with `env` alone, stdin closed (Codex reads a piped
    stdin as more prompt); past TIMEOUT_S its process group is killed and the test fails."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: the tools it runs end with it
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):  # it ended as the wait did
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = await process.communicate()
        run = AgentRun(
            tuple(argv), -1, stdout.decode(errors="replace"), stderr.decode(errors="replace")
        )
        pytest.fail(f"still running after {TIMEOUT_S:.0f} s:\n{run}")
    return AgentRun(
        tuple(argv),
        process.returncode,
        stdout.decode(errors="replace"),
        stderr.decode(errors="replace"),
    )


async def windows_sized_for_agents(served: Gateway, window: int = AGENT_CONTEXT_WINDOW) -> None:
    """Every provider's context window made `window` (AGENT_CONTEXT_WINDOW: as an operator
    would for the models a coding agent runs on), the providers a test adds, Anthropic's
    among them, too."""
    names = await sync_to_async(
        lambda: list(Provider.objects.exclude(context_window=window).values_list("name", flat=True))
    )()
    for name in names:
        await update_provider(served, name, context_window=window)


@dataclass(frozen=True)
class ClaudeCode:
    """`claude -p` against the gateway at `base_url` with the suite's client key."""

    executable: Path
    base_url: str
    gateway: Gateway
    home: AgentHome
    closed_port: int

    @property
    def notes(self) -> Path:
        return self.home.work / NOTES

    async def run(
        self, prompt: str, *flags: str, model: str = "auto", window: int = AGENT_CONTEXT_WINDOW
    ) -> AgentRun:
        await windows_sized_for_agents(self.gateway, window)
        env = self.home.environment(
            self.closed_port,
            ANTHROPIC_BASE_URL=self.base_url,
            ANTHROPIC_API_KEY=TEST_CLIENT_KEY,
            **CLAUDE_CODE_QUIET,
        )
        argv = [str(self.executable), "-p", prompt, "--model", model, *flags]
        return await run_cli(argv, cwd=self.home.work, env=env)


@dataclass(frozen=True)
class Codex:
    """`codex exec` against the gateway at `base_url` (its Responses door) with the suite's
    client key, configured in a CODEX_HOME of its own."""

    executable: Path
    base_url: str
    gateway: Gateway
    home: AgentHome
    closed_port: int

    async def exec(self, prompt: str, *flags: str, model: str = "auto") -> AgentRun:
        await windows_sized_for_agents(self.gateway)
        codex_home = self.home.home / ".codex"
        codex_home.mkdir(exist_ok=True)
        (codex_home / "config.toml").write_text(
            CODEX_CONFIG.format(model=model, base_url=self.base_url)
        )
        env = self.home.environment(
            self.closed_port, CODEX_HOME=str(codex_home), FAILOVER_KEY=TEST_CLIENT_KEY
        )
        argv = [str(self.executable), "exec", "--skip-git-repo-check", *flags, prompt]
        return await run_cli(argv, cwd=self.home.work, env=env)


@pytest.fixture(scope="session")
def claude_code_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Claude Code's executable, checked once per worker, before any server starts."""
    home = AgentHome.made_in(tmp_path_factory.mktemp("claude-code-version"))
    return pinned_cli("claude", CLAUDE_CODE, home)


@pytest.fixture(scope="session")
def codex_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = AgentHome.made_in(tmp_path_factory.mktemp("codex-version"))
    return pinned_cli("codex", CODEX, home)


@pytest.fixture
def agent_home(tmp_path: Path) -> AgentHome:
    return AgentHome.made_in(tmp_path)


@pytest.fixture
def claude_code(
    claude_code_cli: Path,
    live_url: str,  # noqa: F811
    gateway: Gateway,  # noqa: F811
    agent_home: AgentHome,
    closed_port: int,
) -> ClaudeCode:
    return ClaudeCode(claude_code_cli, live_url, gateway, agent_home, closed_port)


@pytest.fixture
def codex(
    codex_cli: Path,
    live_url: str,  # noqa: F811
    gateway: Gateway,  # noqa: F811
    agent_home: AgentHome,
    closed_port: int,
) -> Codex:
    return Codex(codex_cli, live_url, gateway, agent_home, closed_port)
