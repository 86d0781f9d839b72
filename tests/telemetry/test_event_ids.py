"""A resume point the event bus cannot read is refused with a 400, before the stream starts.

Once the stream has answered 200, a `Last-Event-ID` Redis cannot read (a number of 2^64 or
more, or non-ASCII digits) would end it with "Invalid stream ID" (found by fuzzing the
declared contract, tests/test_openapi_contract.py).
"""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


def subscribe(server: ServerProcess, secret: str, **params: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/telemetry/stream",
        params=params,
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )


@pytest.mark.parametrize(
    "after",
    [
        "18446744073709551616",  # 2^64
        "1-18446744073709551616",
        "99999999999999999999999",
        "²",
        "١٢٣-0",
        "1-",
        "-1",
    ],
)
def test_an_event_id_the_bus_cannot_read_is_refused(
    mortar_server: ServerProcess, tenant: Tenant, after: str
) -> None:
    response = subscribe(mortar_server, tenant.secret, last_event_id=after)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_parameter"


def test_the_largest_event_id_is_a_resume_point(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    largest = f"{2**64 - 1}-{2**64 - 1}"

    with httpx.stream(
        "GET",
        f"{mortar_server.base_url}/v1/telemetry/stream",
        params={"last_event_id": largest},
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=httpx.Timeout(10, read=0.5),
    ) as response:
        lines = response.iter_lines()
        assert response.status_code == 200
        assert (next(lines), next(lines)) == (": connected", "")
        # Still open: nothing newer arrives, and the stream did not break.
        with pytest.raises(httpx.ReadTimeout):
            next(lines)


@pytest.mark.parametrize(
    "header",
    [
        "99999999999999999999999-0",  # once a 200, then the connection dropped
        "18446744073709551616-0",
        "1-18446744073709551616",
        "0-0-0",
        "1e3-0",
    ],
)
def test_an_out_of_range_last_event_id_header_is_a_400_before_the_stream(
    mortar_server: ServerProcess, tenant: Tenant, header: str
) -> None:
    response = httpx.get(
        f"{mortar_server.base_url}/v1/telemetry/stream",
        headers={"Authorization": f"Bearer {tenant.secret}", "Last-Event-ID": header},
        timeout=10,
    )

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": "`Last-Event-ID` must be an event id such as 1700000000000-0, each number "
            "below 2^64.",
            "type": "invalid_request_error",
            "param": "Last-Event-ID",
            "code": "invalid_parameter",
        }
    }
