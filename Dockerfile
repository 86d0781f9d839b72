# syntax=docker/dockerfile:1
# Mortar's image: the gateway (uvicorn workers), the Celery worker and beat all run from it
# (docker-compose.yml; docs/operating/deploying.md). Three stages: the dashboard's npm assets, the
# Python dependencies, and a slim runtime without compilers or npm, run as a non-root user.

# 1. The dashboard's third-party browser code, from npm (what `make assets` does).
FROM node:22-slim AS assets
WORKDIR /src/dashboard/frontend
COPY dashboard/frontend/package.json dashboard/frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error

# 2. The Python dependencies declared in pyproject.toml, into a virtual environment.
FROM python:3.11-slim AS python-deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY pyproject.toml /tmp/pyproject.toml
# `[project] dependencies` only: the dev extra (test and lint tools) has no place in a server.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt

# 3. The runtime: the source tree, the venv and the assets; no build tools.
FROM python:3.11-slim AS runtime
RUN groupadd --system --gid 10001 mortar \
    && useradd --system --uid 10001 --gid mortar --home-dir /app --shell /usr/sbin/nologin mortar
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=config.settings \
    MORTAR_VAR_DIR=/app/var
WORKDIR /app
COPY --from=python-deps /opt/venv /opt/venv
COPY manage.py pyproject.toml ./
COPY config ./config
COPY core ./core
COPY accounts ./accounts
COPY billing ./billing
COPY gateway ./gateway
COPY telemetry ./telemetry
COPY replay ./replay
COPY dashboard ./dashboard
COPY mockmodel ./mockmodel
COPY mortar ./mortar
COPY --from=assets /src/dashboard/frontend/node_modules/uplot/dist/uPlot.iife.min.js \
    /src/dashboard/frontend/node_modules/uplot/dist/uPlot.min.css \
    ./dashboard/static/dashboard/vendor/
# var/ holds the run writer's spool and crash log (one set per process): a named volume in
# docker-compose.yml keeps it across restarts, owned by the user the processes run as.
RUN mkdir -p /app/var && chown mortar:mortar /app/var
USER mortar
EXPOSE 8000
# Replaced per service in docker-compose.yml; alone, the image serves the gateway.
CMD ["python", "-m", "config.serve", "--host", "0.0.0.0", "--port", "8000", \
     "--loop", "core.http.event_loop:new_event_loop", "--http", "httptools", \
     "--no-access-log"]
