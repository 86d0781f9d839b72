"""Settings for the test suite, on the backends `MORTAR_TEST_BACKENDS` names, isolated per run.

- `services` (the default, `make test`): the real Postgres and Redis. Each run gets its own
  test database name and Redis key / channel-layer prefix, so two suites (or a suite and a
  running server) on the same servers never see each other's data. The defaults are the local
  servers at 127.0.0.1:5432 and :6379; DATABASE_URL / REDIS_URL override. Under pytest-xdist
  (`make test`'s default) each worker gets its own too.
- `embedded` (`make test-embedded`): what `make serve` runs on a bare machine — SQLite, the
  memory backplane, the in-memory channel layer and cache, Celery eager — whatever the
  environment says. The test database is a file under the run's MORTAR_VAR_DIR, so the server
  processes the tests start share it with the test process.
"""

import os
import tempfile
import uuid

from django.core.exceptions import ImproperlyConfigured

BACKENDS = os.environ.setdefault("MORTAR_TEST_BACKENDS", "services")
RUN_TAG = os.environ.setdefault("MORTAR_TEST_RUN", uuid.uuid4().hex[:10])
os.environ.setdefault("MORTAR_VAR_DIR", tempfile.mkdtemp(prefix=f"mortar-test-{RUN_TAG}-"))
os.environ.setdefault("MORTAR_REDIS_PREFIX", f"mortar-test-{RUN_TAG}")
# Under pytest-xdist each worker process (gw0, gw1, …) is a suite of its own: it inherits the
# run's values from the controller, and gets a var directory and Redis prefix of its own below
# them (pytest-django gives it a test database of its own by suffixing the name with the
# worker's id). Without this the workers' servers would share secret keys, metrics files,
# channel-layer groups and budget counters.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# A child process that inherits a worker's values keeps them.
if WORKER and not os.environ["MORTAR_REDIS_PREFIX"].endswith(f"-{WORKER}"):
    os.environ["MORTAR_VAR_DIR"] = os.path.join(os.environ["MORTAR_VAR_DIR"], WORKER)
    os.environ["MORTAR_REDIS_PREFIX"] = f"{os.environ['MORTAR_REDIS_PREFIX']}-{WORKER}"
if BACKENDS == "services":
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    os.environ.setdefault("MORTAR_TEST_DB_NAME", f"test_mortar_{RUN_TAG}")
elif BACKENDS == "embedded":
    # Set, not defaulted: a CI environment that exports DATABASE_URL or REDIS_URL must not
    # turn this run into a second run on the services.
    os.environ["DATABASE_URL"] = ""
    os.environ["REDIS_URL"] = ""
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = ""
    os.environ["MORTAR_TEST_DB_NAME"] = os.path.join(
        os.environ["MORTAR_VAR_DIR"], f"test_mortar_{RUN_TAG}.sqlite3"
    )
else:
    raise ImproperlyConfigured(
        f"MORTAR_TEST_BACKENDS must be `services` or `embedded`, not {BACKENDS!r}"
    )

from config.settings import *  # noqa: E402,F403
