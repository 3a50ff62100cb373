"""`make run` end to end: a fresh data folder, the real command, a real HTTP client."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def running_platform(tmp_path, closed_port):
    assert shutil.which("make"), "make is one of the two commands"
    log = tmp_path / "run.log"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DEBUG"}
    }
    env.update(ENV_FILE="", DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    with log.open("w") as out:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "run", f"PORT={closed_port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{closed_port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield base_url, log.read_text()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


def test_make_run_serves_the_admin_with_the_demo_data_and_the_50_answers(running_platform):
    base_url, output = running_platform
    password = re.search(r"password: (\S+)", output).group(1)
    with httpx.Client(base_url=base_url, timeout=10) as browser:
        assert browser.get("/readyz").json()["status"] == "ready"
        assert browser.get("/static/admin/css/base.css").status_code == 200
        login = browser.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        signed_in = browser.post(
            "/admin/login/?next=/admin/",
            data={"username": "admin", "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{base_url}/admin/login/"},
            follow_redirects=True,
        )
        assert "Control room" in signed_in.text
        answers = browser.get("/admin/providers/staticanswer/").text
        assert "50 static answers" in answers
        providers = browser.get("/admin/providers/provider/").text
        for name in ("ollama-local", "openai-cloud", "anthropic-cloud"):
            assert name in providers
