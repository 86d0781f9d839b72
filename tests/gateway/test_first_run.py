"""What a new operator pastes: the lines `manage.py bootstrap --base-url` prints before `make
serve` serves (the address, and a first request) call the server there and get a reply."""

from __future__ import annotations

import io
import subprocess

import orjson
import pytest
from django.core.management import call_command

from accounts.management.commands.bootstrap import usage
from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


def test_bootstrap_prints_the_address_and_a_first_request(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("bootstrap", base_url="http://127.0.0.1:9000/", stdout=out)
    lines = out.getvalue().splitlines()
    secret = lines[0].rsplit(" ", 1)[1]

    assert lines[0] == f"Demo organization 'demo', API key: {secret}"
    assert "\n".join(lines[1:]) == usage("http://127.0.0.1:9000", secret)
    assert lines[1] == (
        "Mortar will serve on http://127.0.0.1:9000 "
        "(the dashboard: http://127.0.0.1:9000/dashboard/). Try it:"
    )
    assert lines[2] == f"  export MORTAR_URL=http://127.0.0.1:9000 MORTAR_API_KEY={secret}"


def test_without_a_base_url_only_the_key_is_printed(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("bootstrap", stdout=out)
    assert out.getvalue().startswith("Demo organization 'demo', API key: mk-")
    assert len(out.getvalue().splitlines()) == 1


def test_the_printed_commands_work_when_pasted(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    pasted = "\n".join(usage(mortar_server.base_url, tenant.secret).splitlines()[1:])
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
