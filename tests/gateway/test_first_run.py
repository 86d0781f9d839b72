"""What a new operator pastes: the lines `manage.py bootstrap --base-url` prints (as `make serve`
does) call the server at that address and get a reply."""

from __future__ import annotations

import subprocess

import orjson
import pytest

from tests.conftest import manage
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


def test_the_printed_commands_call_the_server_they_name(mortar_server: ServerProcess) -> None:
    printed = manage("bootstrap", "--base-url", f"{mortar_server.base_url}/")
    lines = printed.splitlines()
    secret = lines[0].rsplit(" ", 1)[1]
    assert lines[1] == (
        f"Mortar will serve on {mortar_server.base_url} "
        f"(the dashboard: {mortar_server.base_url}/dashboard/). Try it:"
    )
    assert lines[2] == f"  export MORTAR_URL={mortar_server.base_url} MORTAR_API_KEY={secret}"

    pasted = "\n".join(lines[2:])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", pasted],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    events = [line[6:] for line in done.stdout.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    reply = "".join(
        choice.get("delta", {}).get("content") or ""
        for event in events[:-1]
        for choice in orjson.loads(event)["choices"]
    )
    assert reply == "It caps how many tokens the model may generate for this reply."


def test_without_a_base_url_only_the_key_is_printed(mortar_server: ServerProcess) -> None:
    printed = manage("bootstrap")
    assert printed.startswith("Demo organization 'demo', API key: mk-")
    assert len(printed.splitlines()) == 1
