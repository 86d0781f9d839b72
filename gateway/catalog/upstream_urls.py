"""What a replica's base URL may be: http(s), a host, and no credentials.

A model server's key belongs in the environment, named by the deployment's `api_key_env`; a
`user:password@` in the URL would be stored in the catalog, shown in the admin and in every
run's record of where it went, and (with a key as well) refused by the HTTP client on every
request (each one a 500). The config file and the admin both ask here.
"""

from __future__ import annotations

from urllib.parse import urlsplit

CREDENTIALS_HELP = (
    "credentials do not belong in an upstream URL: remove the user:password@ and name the "
    "environment variable that holds the model server's key in `api_key_env`"
)


def upstream_url_problem(url: str) -> str | None:
    """What is wrong with `url` as a replica's base URL, or None; never repeats a password."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 — parsing the port is what raises on a bad one
    except ValueError:
        return f"{url!r} is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) base URL such as http://host:8000/v1"
    if parts.username is not None or parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        return f"{parts.scheme}://…@{host}: {CREDENTIALS_HELP}"
    return None
