"""A run's images on its dashboard page: thumbnails served to staff only, with the stored bytes
and their content type, and only through a run of the organization that sent them."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Organization
from telemetry.models import Image, Run, RunImage
from telemetry.store.batches import write_batch
from telemetry.store.fields import ImageRecord, RunFields
from telemetry.store.items import RunOpened
from tests.support.images import data_url, image_bytes

pytestmark = pytest.mark.django_db


def organization() -> Organization:
    return Organization.objects.create(name=f"dash-images-{secrets.token_hex(6)}")


def run_with_images(org: Organization, *images: tuple[str, bytes]) -> tuple[str, bytes]:
    """A run whose request carried `images` (media type, bytes), written by the run writer;
    its id and the body as received."""
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Look"}]
    parts += [
        {"type": "image_url", "image_url": {"url": data_url(data, media_type)}}
        for media_type, data in images
    ]
    body = orjson.dumps({"model": "v", "messages": [{"role": "user", "content": parts}]})
    fields = {
        "id": run_id,
        "organization_id": org.id,
        "accepted_at": datetime(2030, 1, 1, tzinfo=UTC),
        "status": Run.Status.COMPLETED,
        "request_body": body,
        "request_bytes": len(body),
    }
    records = tuple(
        ImageRecord(media_type, data, 40, 30, f"messages[0].content[{position + 1}]")
        for position, (media_type, data) in enumerate(images)
    )
    write_batch([RunOpened(cast(RunFields, fields), records)])
    return run_id, body


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("images-staff", is_staff=True))
    return client


def test_the_run_page_shows_each_image_as_a_thumbnail(staff_client: Client) -> None:
    png, gif = image_bytes("image/png", (40, 30)), image_bytes("image/gif", (40, 30))
    run_id, _ = run_with_images(organization(), ("image/png", png), ("image/gif", gif))

    page = staff_client.get(f"/dashboard/runs/{run_id}/").content.decode()

    assert f'<img src="/dashboard/runs/{run_id}/images/0"' in page
    assert f'<img src="/dashboard/runs/{run_id}/images/1"' in page
    assert "messages[0].content[1]" in page and "messages[0].content[2]" in page
    assert "image/png · 40\u00d730" in page and "image/gif · 40\u00d730" in page
    assert "2 images, stored once each by content" in page


def test_a_thumbnail_is_the_stored_bytes_with_their_content_type(staff_client: Client) -> None:
    jpeg = image_bytes("image/jpeg", (40, 30))
    run_id, _ = run_with_images(organization(), ("image/jpeg", jpeg))

    response = staff_client.get(f"/dashboard/runs/{run_id}/images/0")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/jpeg"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.content == jpeg


def test_a_position_the_run_has_no_image_at_is_a_404(staff_client: Client) -> None:
    run_id, _ = run_with_images(organization(), ("image/png", image_bytes()))

    assert staff_client.get(f"/dashboard/runs/{run_id}/images/1").status_code == 404
    assert staff_client.get("/dashboard/runs/chatcmpl-nope/images/0").status_code == 404


def test_an_image_is_only_reached_through_a_run_of_its_own_organization(
    staff_client: Client,
) -> None:
    ours, theirs = organization(), organization()
    secret_image = image_bytes()
    run_with_images(theirs, ("image/png", secret_image))
    their_image = Image.objects.get(organization=theirs)
    run_id, _ = run_with_images(ours, ("image/png", image_bytes()))
    # A link from our run to their image (no code path makes one): never followed.
    RunImage.objects.create(run_id=run_id, position=1, image=their_image)

    assert staff_client.get(f"/dashboard/runs/{run_id}/images/1").status_code == 404
    page = staff_client.get(f"/dashboard/runs/{run_id}/").content.decode()
    assert f"/dashboard/runs/{run_id}/images/1" not in page


@pytest.mark.parametrize("staff", [False, None])
def test_only_staff_get_an_image(client: Client, staff: bool | None) -> None:
    run_id, _ = run_with_images(organization(), ("image/png", image_bytes()))
    if staff is not None:
        client.force_login(User.objects.create_user("images-visitor", is_staff=staff))

    response = client.get(f"/dashboard/runs/{run_id}/images/0")

    assert response.status_code == 302
    assert response["Location"].startswith("/dashboard/login/?next=")


def test_download_and_curl_give_the_request_back_with_its_images(staff_client: Client) -> None:
    png = image_bytes()
    run_id, body = run_with_images(organization(), ("image/png", png))
    stored = bytes(Run.objects.get(pk=run_id).request_body)
    assert stored != body  # the store holds a reference

    exported = orjson.loads(staff_client.get(f"/dashboard/runs/{run_id}/download").content)
    page = staff_client.get(f"/dashboard/runs/{run_id}/").content.decode()

    assert exported["request_body"] == {"encoding": "utf-8", "data": body.decode()}
    assert data_url(png) in page  # in the curl command, which sends the request again
