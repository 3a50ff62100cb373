"""The caller's address behind Debian's nginx, set up as docs/operations.md's "Running in
production" says (its uvicorn flags, its TRUSTED_PROXY_HOPS, its nginx upstream and `location /`),
and behind uvicorn's old unsafe flags (`--proxy-headers --forwarded-allow-ips '*'`): a client
writing X-Forwarded-For values never gets a new anonymous rate window, the probes' detail, past the
metrics' allow-list or out of its address's log-in count.

Real processes over loopback: nginx with its own configuration in a temporary prefix, in front
of uvicorn serving the gateway on a migrated SQLite file of its own (in-process state), one of
each per set-up for the module. The clients connect from 127.0.0.1; "another real address" is
127.0.0.2 (all of 127.0.0.0/8 is the loopback), the only one the allow-lists name.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from devtools.ports import free_port
from tests.failover_site.test_make_run import running_platform  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")
ALLOWED = "127.0.0.2"  # the only address the probes' detail and /metrics are open to
MAX_FAILURES = 2  # the gateways' ADMIN_LOGIN_MAX_FAILURES
THROTTLED = "Too many failed log-ins"
# What a client writes: others' addresses, the allowed one, spellings and garbage.
FORGED = [f"198.51.100.{n}" for n in range(22)] + [
    ALLOWED, f"{ALLOWED}:80", f"[::ffff:{ALLOWED}]:443", "::1", "garbage", "10.0.0.1:8080",
    "[2001:db8::1]", f"203.0.113.9, {ALLOWED}",
]  # fmt: skip
UNSAFE_FLAGS = ["--proxy-headers", "--forwarded-allow-ips", "*"]


def _production_block() -> str:
    section = OPERATIONS.split("## Running in production", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")


def _nginx_block() -> str:
    section = OPERATIONS.split("## Running in production", 1)[1]
    found = re.search(r"```nginx\n(.*?)```", section, re.S)
    assert found, "the production section shows nginx's configuration"
    return found.group(1)


def _inside(text: str, opening: str) -> list[str]:
    """The directives of the block `opening {` in an nginx configuration, nested ones kept."""
    lines, depth, inside = [], 0, False
    for line in text.splitlines():
        stripped = line.split("#", 1)[0].strip()
        if not inside:
            inside = stripped == f"{opening} {{"
            depth = 1 if inside else 0
            continue
        depth += stripped.count("{") - stripped.count("}")
        if depth == 0:
            return lines
        if stripped:
            lines.append(stripped)
    raise AssertionError(f"no `{opening} {{` block in the documented nginx configuration")


def documented_uvicorn_flags() -> list[str]:
    line = next(
        line.strip()
        for line in _production_block().splitlines()
        if line.strip().startswith("uvicorn failover_site.asgi:application")
    )
    return shlex.split(line)[2:]


def documented_hops() -> int:
    found = re.search(r"\bTRUSTED_PROXY_HOPS=(\d+)", _production_block())
    return int(found.group(1)) if found else 0


@dataclass(frozen=True)
class Setup:
    name: str
    uvicorn_flags: tuple[str, ...]
    hops: int
    # Whether the gateway can tell two real clients apart (else all share "unverified").
    tells_addresses_apart: bool
    # Whether the gateway should tell the operator to turn uvicorn's proxy headers off.
    warns: bool


DOCUMENTED_SETUP = Setup(
    "documented", tuple(documented_uvicorn_flags()), documented_hops(), True, False
)
_UNSAFE = tuple(
    flag
    for flag in DOCUMENTED_SETUP.uvicorn_flags
    if flag not in {"--no-proxy-headers", "--proxy-headers"}
) + tuple(UNSAFE_FLAGS)
SETUPS = [
    DOCUMENTED_SETUP,
    Setup("unsafe-flags-no-hops", _UNSAFE, 0, False, True),
    Setup("unsafe-flags-one-hop", _UNSAFE, 1, True, True),
]
EACH = pytest.mark.parametrize("setup", SETUPS, ids=[setup.name for setup in SETUPS])


@dataclass(frozen=True)
class Served:
    url: str  # nginx's
    log: Path  # uvicorn's output


def _with(flags: tuple[str, ...], **values: str) -> list[str]:
    """The flags with `--name value` set to these values (added where missing)."""
    out, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif flag.removeprefix("--").replace("-", "_") in values:
            skip = True
        else:
            out.append(flag)
    for name, value in values.items():
        out += [f"--{name.replace('_', '-')}", value]
    return out


def _child_env(data_dir: Path, **extra: str) -> dict[str, str]:
    drop = {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"}
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env.pop("FORWARDED_ALLOW_IPS", None)  # uvicorn's own default for the flag
    return {**env, "ENV_FILE": "", "DEBUG": "true", "DATA_DIR": str(data_dir), **extra}


# The database the gateways start from: migrated, anonymous access on (its default limits).
MIGRATE_AND_CONFIGURE = (
    "import django; django.setup(); from django.core.management import call_command; "
    "call_command('migrate', interactive=False, verbosity=0); "
    "from providers.selectors import policy_get; "
    "p = policy_get(); p.anonymous_access = True; p.full_clean(); p.save()"
)


def _nginx_conf(prefix: Path, listen: int, upstream: int) -> str:
    nginx = _nginx_block()
    name = re.search(r"^upstream (\w+) \{", nginx, re.M).group(1)
    pool = [line for line in _inside(nginx, f"upstream {name}") if not line.startswith("server ")]
    location = _inside(nginx, "location /")
    assert f"proxy_pass http://{name};" in location
    user = f"user {pwd.getpwuid(0).pw_name};" if os.geteuid() == 0 else ""
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}
worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
{temp}
    upstream {name} {{
        server 127.0.0.1:{upstream};
        {" ".join(pool)}
    }}
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            {" ".join(location)}
        }}
    }}
}}
"""


def _wait_healthy(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[dict[str, Served]]:
    """Each set-up's gateway behind its nginx, by name."""
    if not Path(NGINX).exists():
        pytest.skip(f"no nginx at {NGINX} (apt-get install nginx)")
    root = tmp_path_factory.mktemp("behind-nginx")
    migrated = root / "migrated"
    env = {**_child_env(migrated), "DJANGO_SETTINGS_MODULE": "failover_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", MIGRATE_AND_CONFIGURE], cwd=ROOT, env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    processes: list[subprocess.Popen] = []
    started: list[tuple[str, subprocess.Popen, Path]] = []
    try:
        for setup in SETUPS:
            data_dir = root / setup.name
            shutil.copytree(migrated, data_dir)
            port, log = free_port(), root / f"{setup.name}-uvicorn.log"
            flags = _with(setup.uvicorn_flags, port=str(port), workers="1")
            child_env = _child_env(
                data_dir,
                TRUSTED_PROXY_HOPS=str(setup.hops),
                PROBE_DETAIL_ALLOWED_IPS=ALLOWED,
                METRICS_ALLOWED_IPS=ALLOWED,
                METRICS_TOKEN="",
                ADMIN_LOGIN_MAX_FAILURES=str(MAX_FAILURES),
                PYTHONUNBUFFERED="1",
            )
            with log.open("w") as out:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "uvicorn", "failover_site.asgi:application", *flags],
                        cwd=ROOT, env=child_env, stdout=out, stderr=subprocess.STDOUT,
                    )
                )  # fmt: skip
            started.append((f"http://127.0.0.1:{port}", processes[-1], log))
        gateways = {}
        for setup, (upstream, process, log) in zip(SETUPS, started, strict=True):
            _wait_healthy(upstream, process, log)
            prefix = root / f"{setup.name}-nginx"
            prefix.mkdir()
            listen = free_port()
            conf = prefix / "nginx.conf"
            conf.write_text(_nginx_conf(prefix, listen, int(upstream.rsplit(":", 1)[1])))
            error_log = prefix / "error.log"
            processes.append(
                subprocess.Popen(
                    [NGINX, "-p", str(prefix), "-c", str(conf), "-e", str(error_log),
                     "-g", "daemon off;"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
            _wait_healthy(f"http://127.0.0.1:{listen}", processes[-1], error_log)
            gateways[setup.name] = Served(f"http://127.0.0.1:{listen}", log)
        yield gateways
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=20)


def client(base_url: str, *, address: str = "127.0.0.1") -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=base_url, transport=transport, timeout=10)


def forged(value: str) -> dict[str, str]:
    return {"X-Forwarded-For": value}


def ask(http: httpx.Client, forwarded: str | None = None) -> int:
    headers = forged(forwarded) if forwarded else {}
    response = http.post("/api/v1/complete", json={"prompt": "Say hello."}, headers=headers)
    assert response.status_code in (200, 429), response.text
    return response.status_code


def log_in(http: httpx.Client, username: str, forwarded: str) -> str:
    """A failed log-in through the admin's form: the page it answers."""
    page = http.get("/admin/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = http.post(
        "/admin/login/?next=/admin/",
        data={"username": username, "password": "wrong", "csrfmiddlewaretoken": token},
        headers=forged(forwarded),
    )
    assert response.status_code == 200, response.text
    return response.text


@EACH
def test_thirty_forged_forwarded_for_values_get_one_anonymous_limit_of_ten(served, setup):
    url = served[setup.name].url
    with client(url) as http:
        statuses = [ask(http, value) for value in FORGED]
    assert len(statuses) == 30
    assert statuses.count(200) == 10, statuses  # the policy's 10 requests a minute
    with client(url, address=ALLOWED) as other:  # another real client: a window of its own
        assert ask(other) == (200 if setup.tells_addresses_apart else 429)


@EACH
def test_a_forged_allowed_address_never_sees_the_probes_detail(served, setup):
    url = served[setup.name].url
    with client(url) as http:
        for value in FORGED:
            body = http.get("/readyz", headers=forged(value)).json()
            assert body == {"status": "ready"}, value
    with client(url, address=ALLOWED) as allowed:
        body = allowed.get("/readyz").json()
    assert ("checks" in body) is setup.tells_addresses_apart


@EACH
def test_a_forged_allowed_address_never_passes_the_metrics_allow_list(served, setup):
    url = served[setup.name].url
    with client(url) as http:
        for value in FORGED:
            response = http.get("/metrics", headers=forged(value))
            assert response.status_code == 403, value
            assert response.json()["error"]["code"] == "address_not_allowed"
    with client(url, address=ALLOWED) as allowed:
        status = allowed.get("/metrics").status_code
    assert status == (200 if setup.tells_addresses_apart else 403)


@EACH
def test_forged_addresses_dont_escape_the_per_address_log_in_count(served, setup):
    url = served[setup.name].url
    with client(url) as http:
        pages = []
        # A new user name each time: only the address's count can refuse them.
        for n, value in enumerate(FORGED[: 10 * MAX_FAILURES]):
            pages.append(log_in(http, f"guess-{n}", value))
            if THROTTLED in pages[-1]:
                break
    assert THROTTLED in pages[-1], f"never refused after {len(pages)} log-ins"
    with client(url, address=ALLOWED) as other:  # another real address: a count of its own
        page = log_in(other, "someone-else", FORGED[0])
    assert (THROTTLED not in page) is setup.tells_addresses_apart


@EACH
def test_the_operator_is_told_once_to_turn_uvicorns_proxy_headers_off(served, setup):
    with client(served[setup.name].url) as http:
        for value in FORGED[:5]:
            http.get("/readyz", headers=forged(value))
    told = served[setup.name].log.read_text().count("Run uvicorn with --no-proxy-headers")
    assert told == (1 if setup.warns else 0)


def test_the_documented_setup_runs_uvicorn_without_its_proxy_headers_behind_one_proxy():
    assert "--no-proxy-headers" in DOCUMENTED_SETUP.uvicorn_flags
    assert DOCUMENTED_SETUP.hops == 1
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in _inside(
        _nginx_block(), "location /"
    )


def test_make_run_goes_by_the_connection_not_a_forwarded_for_a_local_client_writes(
    running_platform,  # noqa: F811
):
    base_url, _ = running_platform
    # From 127.0.0.1, in the probes' default allow-list: the detail, whatever the header says.
    response = httpx.get(f"{base_url}/readyz", headers=forged("203.0.113.9"), timeout=10)
    assert "checks" in response.json()
