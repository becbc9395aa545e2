"""`importer import s3://bucket/key`: through the service's object store (moto's real S3 server),
streamed, the job sealed with the object's size and sha256."""

from __future__ import annotations

import gzip
import hashlib
import json
import uuid
from pathlib import Path

import aioboto3
import pytest

from tests.acceptance.test_admin_cli import importer
from tests.support import cpf, db_state, fetch, write_csv

pytestmark = pytest.mark.acceptance

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": "us-east-1",
}


async def upload(endpoint: str, bucket: str, key: str, body: bytes) -> None:
    session = aioboto3.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    async with session.client("s3", endpoint_url=endpoint) as client:
        await client.create_bucket(Bucket=bucket)
        await client.put_object(Bucket=bucket, Key=key, Body=body)


async def test_import_an_s3_object(db_dsn: str, s3_endpoint: str, tmp_path: Path) -> None:
    rows = [[f"P{n}", cpf(5000 + n)] for n in range(250)]
    body = gzip.compress(write_csv(tmp_path / "c.csv", ["nome", "cpf"], rows).read_bytes())
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    key = "lists/2026/contacts.csv.gz"
    await upload(s3_endpoint, bucket, key, body)
    env = {"S3_ENDPOINT_URL": s3_endpoint, "IMPORTER_BUCKET": "another", **CREDENTIALS}

    url = f"s3://{bucket}/{key}"
    args = ("import", url, "--client-id", "31", "--chunk-size", "40", "--json")
    done = importer(db_dsn, *args, **env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert (outcome["status"], outcome["inserted"]) == ("completed", 250)

    job = await fetch(
        db_dsn,
        "SELECT source, source_size, source_sha256, bytes_total FROM import_job WHERE id = $1",
        uuid.UUID(outcome["job_id"]),
    )
    assert job[0]["source"] == url
    assert job[0]["source_size"] == job[0]["bytes_total"] == len(body)
    assert job[0]["source_sha256"] == hashlib.sha256(body).hexdigest()
    assert len(await db_state(db_dsn, 31)) == 250

    status = json.loads(importer(db_dsn, "status", outcome["job_id"], "--json").stdout)
    assert (status["size"], status["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())


async def test_s3_refusals(db_dsn: str, s3_endpoint: str) -> None:
    unconfigured = importer(db_dsn, "import", "s3://bucket/k.csv", "--client-id", "1")
    assert unconfigured.returncode == 2
    assert "S3_ENDPOINT_URL" in unconfigured.stderr
    assert unconfigured.stderr.count("\n") == 1, unconfigured.stderr

    env = {"S3_ENDPOINT_URL": s3_endpoint, **CREDENTIALS}
    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    await upload(s3_endpoint, bucket, "other.csv", b"nome,cpf\n")
    missing = importer(db_dsn, "import", f"s3://{bucket}/none.csv", "--client-id", "1", **env)
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    bad = importer(db_dsn, "import", "s3://Not_A_Bucket/k.csv", "--client-id", "1", **env)
    assert bad.returncode == 2
    assert "bucket name" in bad.stderr
    jobs = await fetch(db_dsn, "SELECT count(*) AS n FROM import_job")
    assert jobs[0]["n"] == 0  # nothing created for a refused source
