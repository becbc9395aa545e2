# syntax=docker/dockerfile:1
# The importer's image: `importer serve` (the API + IMPORTER_WORKERS job workers) by default;
# `docker run IMAGE worker` or `IMAGE db migrate` for the other commands.

# Build stage: install exactly the committed lock (uv.lock, hash-checked; the runtime
# dependencies only, no embedded PostgreSQL) into a virtualenv at /opt/venv, then the importer's
# wheel (the compiler builds its Cython hot path with the setuptools and Cython pinned in
# pyproject.toml's [tool.uv]). `uv export --locked` fails on a lock stale against pyproject.toml.
# scripts/check-container runs these steps without a Docker engine.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    UV_NO_CACHE=1
WORKDIR /src
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY scripts/uv-requirements.txt ./scripts/
RUN python -m pip install --require-hashes --no-deps -r scripts/uv-requirements.txt
COPY pyproject.toml uv.lock setup.py README.md ./
COPY importer ./importer
RUN uv export --locked --no-emit-project --format requirements-txt -o requirements.txt \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --require-hashes --no-deps -r requirements.txt \
    && uv build --wheel --out-dir wheels \
    && /opt/venv/bin/pip install --no-deps wheels/importer-*.whl

# Runtime stage: the slim base plus the virtualenv only (same base, so its python path holds).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    IMPORTER_LOG_FORMAT=json \
    IMPORTER_STORAGE_DIR=/var/lib/importer/objects
# A fixed uid/gid, so a mounted volume's ownership is predictable.
RUN groupadd --system --gid 10001 importer \
    && useradd --system --uid 10001 --gid importer --home-dir /var/lib/importer \
        --no-create-home --shell /usr/sbin/nologin importer \
    && install -d -o importer -g importer -m 0750 /var/lib/importer /var/lib/importer/objects
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /var/lib/importer
# Uploaded files when S3_ENDPOINT_URL is unset (the local object store).
VOLUME ["/var/lib/importer/objects"]
EXPOSE 8000
# /healthz answers while the process lives; /readyz adds the database, storage and workers.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
ENTRYPOINT ["importer"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
