"""Screenshots of every dashboard page, for reviewers without a browser (`make screenshots`).

Builds a throwaway embedded Mortar (SQLite, in-memory channel layer) under
`<out>/state/`, seeds it (`manage.py seeddemo`), starts it on a free port with uvicorn,
sends real requests (one slow stream kept running for the live view), and photographs each
page in headless Debian Chromium through Playwright.

    .venv/bin/python -m dashboard.screenshots --out var/screenshots

With `--docs docs/screenshots` (`make docs-screenshots`) it also writes the pages the
documentation shows into that folder, reduced to 256 colours and cut at 1,600 px so the
repository stays small.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "demo-operator-password"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# The screenshots the documentation shows (docs/dashboard.md and the README): one a page.
DOCS_SHOTS = (
    "02-overview",
    "03-live",
    "05-runs-search",
    "06-run",
    "07-sessions",
    "08-audit",
    "09-budgets",
    "10-spend",
    "12-keys",
    "14-rerun",
    "15-compare",
    "16-playground",
)
# A long page (the sessions list) is cut at this height in the documentation's copy.
DOCS_MAX_HEIGHT = 1600
QUESTIONS = [
    "What does max_tokens limit?",
    "Summarize the incident report for the on-call channel",
    "Which replica served the last request in this conversation?",
    "Draft a reply to the customer about the delayed invoice",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(state: Path) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.update(
        {
            "MORTAR_VAR_DIR": str(state),
            "DATABASE_URL": "",
            "REDIS_URL": "",
            "SECRET_KEY": "screenshots-only-secret-key",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.1)
    server.terminate()
    raise SystemExit(f"the server did not start:\n{log.read_text()}")


def send(base: str, secret: str, question: str, **extra: object) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": question}], "stream": False, **extra}
    return httpx.post(
        f"{base}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={
            "Authorization": f"Bearer {secret}",
            "X-Mortar-Session": "conv-7",
            "X-Mortar-End-User-Id": "ana",
        },
        timeout=30,
    )


def slow_stream(base: str, secret: str, finished: threading.Event) -> None:
    words = " ".join(f"step {i} of the migration plan," for i in range(60))
    with httpx.stream(
        "POST",
        f"{base}/v1/chat/completions",
        content=orjson.dumps(
            {"model": "demo-slow", "messages": [{"role": "user", "content": words}]}
        ),
        headers={"Authorization": f"Bearer {secret}", "X-Mortar-Session": "conv-live"},
        timeout=120,
    ) as response:
        for _ in response.iter_lines():
            if finished.is_set():
                break


def photograph(base: str, secret: str, out: Path, run_id: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("MORTAR_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        raise SystemExit("screenshots need Debian's chromium: apt-get install -y chromium")
    shots: list[Path] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1440, "height": 900})

        def shot(name: str) -> None:
            path = out / f"{name}.png"
            page.screenshot(path=str(path), full_page=True)
            shots.append(path)

        page.goto(f"{base}/dashboard/")
        page.wait_for_url("**/dashboard/login/**")
        shot("01-sign-in")
        page.fill("input[name=username]", "operator")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/dashboard/")
        page.wait_for_selector(".chart canvas")
        shot("02-overview")

        page.goto(f"{base}/dashboard/live/")
        page.wait_for_selector("#socket-state[data-state=open]")
        finished = threading.Event()
        streamer = threading.Thread(target=slow_stream, args=(base, secret, finished))
        streamer.start()
        page.wait_for_selector("#in-flight tbody tr")
        for question in QUESTIONS[:3]:
            send(base, secret, question)
        page.wait_for_timeout(2500)  # tokens so far grow; events arrive
        shot("03-live")
        finished.set()
        streamer.join(30)

        page.goto(f"{base}/dashboard/runs/")
        shot("04-runs")
        page.goto(f"{base}/dashboard/runs/?session=conv-7")
        shot("05-runs-filtered")
        page.goto(f"{base}/dashboard/runs/?q=caps+tokens")  # words of a reply
        shot("05-runs-search")
        page.goto(f"{base}/dashboard/runs/{run_id}/")
        page.click("#replay-fast")
        page.wait_for_selector("#replay[data-state=done]")
        shot("06-run")
        page.goto(f"{base}/dashboard/sessions/")
        shot("07-sessions")
        page.goto(f"{base}/dashboard/audit/")
        shot("08-audit")
        page.goto(f"{base}/dashboard/budgets/")
        shot("09-budgets")
        page.goto(f"{base}/dashboard/spend/")
        page.wait_for_selector("#spend-charts .chart canvas")
        shot("10-spend")
        page.goto(f"{base}/dashboard/keys/")
        page.select_option("#key-create select[name=organization]", label="acme")
        page.fill("#key-create input[name=name]", "reporting")
        page.fill("#key-create input[name=budget_usd]", "250")
        page.click("#key-create button[type=submit]")
        page.wait_for_selector("#new-secret")
        shot("11-keys-created")
        page.reload()  # the secret is gone: the list and the audit of changes
        page.wait_for_selector("#key-changes")
        shot("12-keys")
        page.goto(f"{base}/admin/accounts/apikey/add/")
        page.select_option("select[name=organization]", label="acme")
        page.fill("input[name=name]", "reporting-admin")
        page.click("input[name=_save]")
        page.wait_for_selector("#key-secret")
        shot("13-admin-key-created")

        # Re-run: the stored request edited (another question), sent again, and compared.
        page.goto(f"{base}/dashboard/runs/{run_id}/rerun")
        request = orjson.loads(page.locator("textarea[name=request]").input_value())
        request["messages"] = [{"role": "user", "content": QUESTIONS[1]}]
        request["temperature"] = 0.2
        page.fill(
            "textarea[name=request]", orjson.dumps(request, option=orjson.OPT_INDENT_2).decode()
        )
        shot("14-rerun")
        page.click("#rerun-send")
        page.wait_for_url("**/compare/**")
        shot("15-compare")

        page.goto(f"{base}/dashboard/playground/")
        key = page.locator("select[name=key] option", has_text="screenshots").first
        page.select_option("select[name=key]", key.get_attribute("value") or "")
        page.select_option("select[name=model]", "demo-slow")
        page.fill("textarea[name=system]", "You are a concise assistant for an inference platform.")
        page.fill("textarea[name=prompt]", QUESTIONS[3])
        page.fill("input[name=max_tokens]", "40")
        page.click("#playground-send")
        page.wait_for_selector("#playground-state[data-state=done]", timeout=60_000)
        shot("16-playground")
        browser.close()
    return shots


def write_docs_shots(shots: list[Path], docs: Path) -> list[Path]:
    """Copy the documentation's screenshots into `docs`, reduced to 256 colours and cut at
    `DOCS_MAX_HEIGHT`."""
    from PIL import Image

    docs.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for path in shots:
        if path.stem not in DOCS_SHOTS:
            continue
        target = docs / path.name
        with Image.open(path) as image:
            top = image.crop((0, 0, image.width, min(image.height, DOCS_MAX_HEIGHT)))
            reduced = top.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
            reduced.save(target, optimize=True)
        written.append(target)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="var/screenshots", type=Path)
    parser.add_argument(
        "--docs", type=Path, help="also write the documentation's screenshots into this folder"
    )
    args = parser.parse_args()
    out: Path = (ROOT / args.out).resolve()
    state = out / "state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    env = environment(state)
    manage(env, "migrate", "--noinput")
    manage(env, "seeddemo", "--password", PASSWORD)
    secret = manage(env, "createkey", "acme", "--name", "screenshots").strip()

    port = free_port()
    server = start_server(env, port, state / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        streamed = httpx.post(
            f"{base}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "messages": [{"role": "user", "content": QUESTIONS[0]}],
                    "stream_options": {"include_usage": True},
                }
            ),
            headers={"Authorization": f"Bearer {secret}", "X-Mortar-Session": "conv-7"},
            timeout=30,
        )
        run_id = streamed.headers["X-Mortar-Run-Id"]
        send(base, secret, QUESTIONS[3], max_tokens=6)
        manage(env, "rollupusage", "--hours", "26")
        shots = photograph(base, secret, out, run_id)
    finally:
        server.terminate()
        server.wait(10)
    if args.docs is not None:
        shots += write_docs_shots(shots, (ROOT / args.docs).resolve())
    for path in shots:
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
