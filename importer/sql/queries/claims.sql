-- Who runs a job: the workers' claims and leases, and the one-import-at-a-time turn of a client.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- name: claim_lock
-- Claims are serialized (they are rare: one per job run), so the fair-share count is exact.
SELECT pg_advisory_xact_lock($1);

-- name: claim_job
-- The first job of the claim's order (the import_claim_queue view) that no live lease holds:
-- queued, or left by a worker whose lease expired (it died; the new owner resumes it from the
-- ledger). Other clients' waiting jobs come before those of a client whose import runs (its
-- turn would idle this worker), which are claimed only when nothing else waits, and only while
-- the client holds fewer than $3 live leases (fair share). An in-process job's lease never
-- expires. An in-process job (the CLI's) is never claimed: `importer job resume` or a requeue
-- decides where it runs on (the view leaves it out). SKIP LOCKED passes over a row a
-- transaction holds (a cancel, a live owner's batch).
-- A claim starts a run: read_to_end_at is cleared. Lease: $1 owner, $2 seconds; $4: the
-- claimable statuses.
-- The view's order without computing it (issue 26: with 100,000 waiting jobs numbering them all
-- took half a second a claim): walking the waiting jobs oldest first (import_job_claim_idx), the
-- first whose client runs nothing is its client's oldest waiting job (an older one of that
-- client would have come first), the view's first; only when there is none, the oldest job
-- whose client holds fewer than $3 live leases. A client's running imports are probes of
-- import_job_client_lease_idx and of the turns held (pg_locks, read once).
WITH turns AS MATERIALIZED (
    SELECT objid::integer AS client_id FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 1243542 AND objsubid = 2 AND granted
),
head AS (
    SELECT j.id FROM import_job j
    WHERE j.status = ANY($4::text[])
      AND j.status IN ('queued', 'normalizing', 'ready', 'importing')  -- the index's predicate
      AND NOT j.in_process AND NOT j.awaiting_apply
      AND coalesce(j.lease_expires_at, '-infinity') <= now()
      AND NOT EXISTS (SELECT FROM turns t WHERE t.client_id = j.client_id)
      AND NOT EXISTS (
          SELECT FROM import_job r
          WHERE r.client_id = j.client_id AND r.lease_owner IS NOT NULL
            AND r.status IN ('queued', 'normalizing', 'ready', 'importing')
            AND r.lease_expires_at IS NOT NULL AND r.lease_expires_at > now()
      )
    ORDER BY j.created_at, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
),
other AS (
    SELECT j.id FROM import_job j
    WHERE NOT EXISTS (SELECT FROM head)
      AND j.status = ANY($4::text[])
      AND j.status IN ('queued', 'normalizing', 'ready', 'importing')
      AND NOT j.in_process AND NOT j.awaiting_apply
      AND coalesce(j.lease_expires_at, '-infinity') <= now()
      AND (
          SELECT count(*) FROM import_job r
          WHERE r.client_id = j.client_id AND r.lease_owner IS NOT NULL
            AND r.status IN ('queued', 'normalizing', 'ready', 'importing')
            AND r.lease_expires_at IS NOT NULL AND r.lease_expires_at > now()
      ) < $3
    ORDER BY j.created_at, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
),
candidate AS (
    SELECT id FROM head UNION ALL SELECT id FROM other
)
UPDATE import_job j
SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $2), read_to_end_at = NULL
FROM candidate c
WHERE j.id = c.id
RETURNING j.*;

-- name: renew_lease
UPDATE import_job SET lease_expires_at = now() + make_interval(secs => $3)
WHERE id = $1 AND lease_owner = $2
RETURNING cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: release_lease
-- Expired at once: the next claim may take the job (and resume it).
UPDATE import_job SET lease_expires_at = now()
WHERE id = $1 AND lease_owner = $2;

-- name: try_client_turn
-- Imports of one client apply one at a time (SPEC: concurrent imports of a client end as some
-- serial order of them): a session advisory lock per client, in its own key space ($1).
SELECT pg_try_advisory_lock(1243542, $1);

-- name: release_client_turn
SELECT pg_advisory_unlock(1243542, $1);
