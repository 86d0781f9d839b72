"""Settings for the test suite: the real Postgres and Redis, isolated per test run.

Each run gets its own test database name and Redis key / channel-layer prefix, so two suites
(or a suite and a running server) on the same servers never see each other's data. The
defaults are the local servers at 127.0.0.1:5432 and :6379; DATABASE_URL / REDIS_URL override.
"""

import os
import tempfile
import uuid

RUN_TAG = os.environ.setdefault("MORTAR_TEST_RUN", uuid.uuid4().hex[:10])
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ.setdefault("MORTAR_REDIS_PREFIX", f"mortar-test-{RUN_TAG}")
os.environ.setdefault("MORTAR_TEST_DB_NAME", f"test_mortar_{RUN_TAG}")
os.environ.setdefault("MORTAR_VAR_DIR", tempfile.mkdtemp(prefix=f"mortar-test-{RUN_TAG}-"))

from config.settings import *  # noqa: E402,F403
