"""The pipeline's series on /metrics: an import through the API, read as deltas (the server is
shared by the session's other tests)."""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.support import JOB_TIMEOUT_S, counters, csv_bytes, token, upload, wait_terminal
from tests.support import cpf

pytestmark = pytest.mark.api

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(http: httpx.AsyncClient) -> tuple[str, Samples]:
    response = await http.get("/metrics")
    assert response.status_code == 200
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    return response.text, samples


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def test_an_import_shows_in_the_pipeline_series(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    rows = [(f"P{i}", cpf(1800 + i)) for i in range(5)] + [("Bad", "123")]
    _, before = await scrape(http)
    response = await upload(http, bearer, csv_bytes(("nome", "cpf"), rows))
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert job["status"] == "completed"
    assert (counters(job)["inserted"], counters(job)["invalid"]) == (5, 1)

    # The job ends (finalized) a moment before its worker counts it: poll with a deadline.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        text, after = await scrape(http)
        if delta(before, after, "importer_jobs_total", status="completed") >= 1:
            break
        assert time.monotonic() < deadline, "the job never showed in importer_jobs_total"
        await asyncio.sleep(0.05)

    assert delta(before, after, "importer_rows_total", outcome="inserted") == 5
    assert delta(before, after, "importer_rows_total", outcome="invalid") == 1
    assert delta(before, after, "importer_rows_total", outcome="error") == 0
    assert delta(before, after, "importer_phase_rows_total", phase="read") == 6
    assert delta(before, after, "importer_phase_rows_total", phase="apply") == 6
    assert delta(before, after, "importer_rows_read_total") == 6
    assert delta(before, after, "importer_bytes_read_total") > 0
    # Chunks of 2 records in 2 key partitions (the server's settings): 3 chunks, 6 batches.
    assert delta(before, after, "importer_chunks_total", result="applied") == 6
    assert delta(before, after, "importer_batch_duration_seconds_count") == 6
    assert delta(before, after, "importer_jobs_total", status="completed") == 1
    assert delta(before, after, "importer_job_duration_seconds_count") == 1
    assert delta(before, after, "importer_job_duration_seconds_sum") > 0
    assert "# TYPE importer_imports_in_flight gauge" in text
    assert ("importer_imports_in_flight", frozenset({("client_id", str(client))})) not in after
    assert ("importer_queue_depth", frozenset()) in after
    assert ("importer_dead_letters_total", frozenset()) in after
    assert ("importer_batch_retries_total", frozenset()) in after
