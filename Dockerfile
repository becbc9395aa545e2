# syntax=docker/dockerfile:1
# First version: the CLI and its dependencies. The service (issue 3) adds serve + HEALTHCHECK.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY importer ./importer
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 importer
COPY --from=build /install /usr/local
USER importer
WORKDIR /home/importer
ENV DATABASE_URL=postgresql://postgres@db:5432/postgres \
    IMPORTER_LOG_FORMAT=json
ENTRYPOINT ["importer"]
CMD ["--help"]
