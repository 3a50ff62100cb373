#!/usr/bin/env python3
"""The gateway's memory under large request bodies: its RSS at rest and at its peak while
`--concurrency` (50) requests, each a chat body of exactly the chat limit, arrive at once.

    .venv/bin/python bench/body_rss.py                    # 50 x 4 MiB to /v1/chat/completions
    .venv/bin/python bench/body_rss.py --shape agent      # bodies the cascade routes upstream
    .venv/bin/python bench/body_rss.py --limit 1048576 --concurrency 20

The gateway is the bench's own (bench/targets.py): embedded mode, DEBUG=false, one Ollama
provider pointing at the fake provider, the bench's client key; one uvicorn process (uvloop,
httptools) whose /proc/<pid>/status is read: VmRSS at rest, then sampled every 20 ms during the
burst, VmHWM (the kernel's high-water mark) after it, and VmRSS once the burst is answered.

Shapes of the body (both JSON exactly `--limit` bytes, sent with a Content-Length):
  chat   a long conversation: 200 turns of prose and code, as a chat client keeps it.
  agent  an agent's request: up to 128 tools with large JSON Schemas and a short tool-using
         conversation.
Either way the provider gets a context window to take it (the body's ~1M-token estimate), so
each request is routed to the fake provider: read, parsed, the upstream request built and sent.

Standard library only, like bench_complete.py; run it as a script. Every process it starts is
stopped at the end, by its PID.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from procs import BENCH_KEY, ROOT, SETUP_TIMEOUT_S, BenchError, Processes, free_port, wait_ready
from targets import PROVIDER_NAME, Bench

PATH = "/v1/chat/completions"
CHAT_LIMIT = 4 * 1024 * 1024  # BODY_LIMIT_CHAT_BYTES's default
HELLO = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}).encode()
PROSE = (
    "The deployment failed again after the migration ran; the logs show a timeout on the "
    "connection pool, and the retry made it worse because every worker reconnected at once. "
)
CODE = "def handler(request):\n    rows = fetch(request.user, limit=50)\n    return render(rows)\n"


def chat_body(size: int) -> bytes:
    """A long chat: a system prompt and 199 alternating turns (the 200 messages the endpoint
    takes at most), grown to exactly `size`."""
    turns = 199
    # Under the size (each message's framing, the escaped new lines), then padded up to it.
    each = max(1, (size - 16_000) * 95 // 100 // turns)
    messages = [{"role": "system", "content": "You are a helpful engineering assistant."}]
    for n in range(turns - 1):
        role = "user" if n % 2 == 0 else "assistant"
        text = (PROSE if role == "user" else PROSE + CODE) * (each // len(PROSE) + 1)
        messages.append({"role": role, "content": text[:each]})
    messages.append({"role": "user", "content": "And what should we change first?"})
    return _exactly({"model": "auto", "messages": messages}, messages[-1], "content", size)


def agent_body(size: int) -> bytes:
    """An agent's request: up to 128 tools whose schemas fill the body, and a short tool-using
    conversation, grown to exactly `size`."""
    count = max(1, min(128, (size - 20_000) // 4096))  # the endpoint takes at most 128
    per_tool = max(1, (size - 20_000) // count)
    tools = []
    for n in range(count):
        properties = {
            f"field_{p}": {"type": "string", "description": PROSE * 2}
            for p in range(max(1, per_tool // (2 * len(PROSE) + 60)))
        }
        function = {
            "name": f"tool_{n}",
            "description": "Reads or changes the workspace.",
            "parameters": {"type": "object", "properties": properties},
        }
        tools.append({"type": "function", "function": function})
    call = {"id": "call_0", "type": "function"}
    call["function"] = {"name": "tool_0", "arguments": '{"field_0": "src/"}'}
    messages = [
        {"role": "user", "content": "Find why the build fails."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": CODE * 40},
        {"role": "user", "content": "Go on."},
    ]
    last = tools[-1]["function"]
    return _exactly(
        {"model": "auto", "tools": tools, "messages": messages}, last, "description", size
    )


def _exactly(body: dict[str, Any], holder: dict[str, Any], key: str, size: int) -> bytes:
    """`body` encoded, `holder[key]` cut or padded with ASCII so the whole is `size` bytes."""
    raw = json.dumps(body, ensure_ascii=False).encode()
    while len(raw) != size:
        text = holder[key]
        if len(raw) - size >= len(text):
            raise BenchError(f"cannot make a body of exactly {size} bytes")
        holder[key] = text + "x" * (size - len(raw)) if len(raw) < size else text[: size - len(raw)]
        raw = json.dumps(body, ensure_ascii=False).encode()
    return raw


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, in kB, from /proc/<pid>/status."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def post(port: int, body: bytes, start: threading.Barrier) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {BENCH_KEY}"}
    try:
        start.wait()
        connection.request("POST", PATH, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError as exc:
        return -abs(getattr(exc, "errno", 0) or 1)
    finally:
        connection.close()


def burst(pid: int, port: int, body: bytes, concurrency: int) -> dict[str, Any]:
    """`concurrency` requests released together; VmRSS sampled until all are answered."""
    start = threading.Barrier(concurrency + 1)
    samples: list[int] = []
    with ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(post, port, body, start) for _ in range(concurrency)]
        start.wait()
        began = time.monotonic()
        while not all(f.done() for f in futures):
            samples.append(memory(pid)["VmRSS"])
            time.sleep(0.02)
        statuses = Counter(f.result() for f in futures)
    return {"seconds": time.monotonic() - began, "statuses": statuses, "samples": samples}


def start_gateway(bench: Bench, procs: Processes) -> tuple[Any, int]:
    variant = bench.variants[0]
    bench.setup_gateway(variant)
    # A window the ~1M-token estimate of such a body fits in: every request reaches the fake.
    widen = (
        "from providers.models import Provider; "
        f"Provider.objects.filter(name={PROVIDER_NAME!r}).update(context_window=4_000_000)"
    )
    argv = [bench.python, "manage.py", "shell", "-c", widen]
    done = procs.run("widen", argv, variant.env, None, SETUP_TIMEOUT_S)
    if done.returncode != 0:
        raise BenchError(f"widening the provider's context window failed:\n{done.stderr}")
    port = free_port()
    argv = [bench.python, "-m", "uvicorn", "failover_site.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--loop", "uvloop",
            "--http", "httptools", "--no-access-log", "--log-level", "warning",
            "--lifespan", "on"]  # fmt: skip
    proc = procs.start("gateway", argv, variant.env, None)
    wait_ready(proc, f"http://127.0.0.1:{port}/healthz")
    return proc, port


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--limit", type=int, default=CHAT_LIMIT, help="Bytes per body.")
    parser.add_argument("--shape", choices=("chat", "agent"), default="chat")
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args(argv)
    if args.limit < 64 * 1024 or args.concurrency < 1:
        parser.error("--limit must be at least 65536 and --concurrency at least 1")
    body = (chat_body if args.shape == "chat" else agent_body)(args.limit)
    work = Path(tempfile.mkdtemp(prefix="bench-body-rss-"))
    procs = Processes(pin=False, log_dir=work)
    options = argparse.Namespace(
        python=args.python, duration=1, warmup=0, baseline=None, redis=False,
        targets=["gateway"], transports=["default"], shared_redis=False, primary_refused=False,
        endpoints=["complete"],
    )  # fmt: skip
    try:
        bench = Bench(options, procs, work)
        # The gateway's chat limit is the body's size: each body is exactly at it.
        bench.variants[0].env["BODY_LIMIT_CHAT_BYTES"] = str(args.limit)
        proc, port = start_gateway(bench, procs)
        small = post(port, HELLO, threading.Barrier(1))
        time.sleep(1)
        rest = memory(proc.pid)
        result = burst(proc.pid, port, body, args.concurrency)
        time.sleep(1)
        after = memory(proc.pid)
    except BenchError as exc:
        print(f"ABORTED: {exc}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
    mib = 1024.0
    peak_sampled = max(result["samples"], default=rest["VmRSS"])
    print(f"body_rss: {args.concurrency} x {len(body)} bytes ({args.shape}) to {PATH}")
    print(f"  a small request first: {small}; the burst answered in {result['seconds']:.2f} s")
    print(f"  statuses: {dict(sorted(result['statuses'].items()))}")
    print(f"  at rest  VmRSS {rest['VmRSS'] / mib:7.1f} MiB")
    print(f"  burst    VmRSS peak sampled {peak_sampled / mib:7.1f} MiB (every 20 ms)")
    print(f"  peak     VmHWM {after['VmHWM'] / mib:7.1f} MiB (since start)")
    print(f"  after    VmRSS {after['VmRSS'] / mib:7.1f} MiB")
    growth = (after["VmHWM"] - rest["VmRSS"]) / mib
    print(f"  growth   {growth:.1f} MiB, {growth / args.concurrency:.1f} MiB a request")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if small == 200 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
