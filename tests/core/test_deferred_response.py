"""`core.http.responses.DeferredResponse`: ninja's temporal response, built only when used."""

from __future__ import annotations

from django.http import HttpResponse

from config.api import api
from core.http.responses import DeferredResponse


def test_an_unused_temporal_response_is_never_built() -> None:
    response = api.create_temporal_response(None)

    assert isinstance(response, DeferredResponse)
    assert "headers" not in vars(response)


def test_a_temporal_response_that_is_used_behaves_as_the_response_it_becomes() -> None:
    deferred = api.create_temporal_response(None)
    plain = HttpResponse("", content_type=api.get_content_type())

    for response in (deferred, plain):
        response.status_code = 201
        response["X-Custom"] = "kept"
        response.set_cookie("c", "v")

    assert isinstance(deferred, HttpResponse)
    assert list(deferred.items()) == list(plain.items())
    assert (deferred.status_code, deferred.content) == (201, b"")
    assert deferred.cookies["c"].value == "v"
