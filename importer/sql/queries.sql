-- Named queries, loaded once by importer/sql/__init__.py. Every value is a bound parameter.

-- name: record_batch
-- The ledger row, last in the batch's transaction: a repeat finds the primary key taken, gets
-- no row back, and rolls the whole batch back. $15: the part (1: the whole batch; the pieces
-- of a split batch have their own rows, see Batch.part); $16: the line after the chunk (with
-- end_offset, the reader's checkpoint).
INSERT INTO import_chunk (job_id, chunk_no, partition, status, first_line, end_offset,
                          rows_read, inserted, updated, invalid, error, ignored, attempts,
                          error_message, part, end_line)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (job_id, chunk_no, partition, part) DO NOTHING
RETURNING 1;

-- name: given_up_error
-- Why a batch ($4: the lines of its rows) was given up after its retries: a discarded ledger
-- row of its chunk and partition and its rows reported chunk_discarded (a row rejected alone is
-- reported row_rejected instead). No row: applied, rejected row by row, or not recorded.
SELECT coalesce(c.error_message, '')
FROM import_chunk c
WHERE c.job_id = $1 AND c.chunk_no = $2 AND c.partition = $3 AND c.status = 'discarded'
  AND EXISTS (
      SELECT 1 FROM import_row_error e
      WHERE e.job_id = $1 AND e.line = ANY($4::integer[]) AND e.reason = 'chunk_discarded'
  )
LIMIT 1;

-- name: record_batch_fenced
-- record_batch for a worker's run, fenced by its lease in the same statement (no extra round
-- trip): the ledger row is written only while $17 holds the lease of the job, still in one of
-- the statuses $18. The job row is locked FOR KEY SHARE until the batch commits, so a reclaim
-- (FOR UPDATE) cannot slip between this check and the commit: it waits, or skips the job.
-- held = false: the lease is lost (the caller rolls the whole batch back); recorded = false:
-- the batch was already applied.
WITH lease AS (
    SELECT id FROM import_job
    WHERE id = $1 AND lease_owner = $17 AND status = ANY($18::text[])
    FOR KEY SHARE
),
recorded AS (
    INSERT INTO import_chunk (job_id, chunk_no, partition, status, first_line, end_offset,
                              rows_read, inserted, updated, invalid, error, ignored, attempts,
                              error_message, part, end_line)
    SELECT id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 FROM lease
    ON CONFLICT (job_id, chunk_no, partition, part) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT FROM lease) AS held, EXISTS (SELECT FROM recorded) AS recorded;

-- name: find_contacts
-- The batch's stored contacts, with their live channels and their values of the import's custom
-- fields ($3). Not locked: every write the batch makes is either an insert that a unique index
-- guards (a concurrent import's new key, channel or value makes it fail and retry, and the retry
-- reads it) or an update to the file's own values, so the result is that of some serial order
-- per key.
-- One index probe per key, whatever the statistics say: the LIMIT inside LATERAL rules out a
-- plan that scans the client's whole index and filters the keys.
SELECT c.id, c.cpf_cnpj, c.name, c.street_address,
       d.channels, d.detail_values, f.field_ids, f.field_values
FROM unnest($2::text[]) AS k (cpf_cnpj)
CROSS JOIN LATERAL (
    SELECT id, cpf_cnpj, name, street_address FROM contact
    WHERE client_id = $1 AND cpf_cnpj = k.cpf_cnpj AND deleted_at IS NULL
    LIMIT 1
) AS c
CROSS JOIN LATERAL (
    SELECT array_agg(channel_id) AS channels, array_agg(value) AS detail_values
    FROM contact_details WHERE contact_id = c.id AND deleted_at IS NULL
) AS d
CROSS JOIN LATERAL (
    SELECT array_agg(custom_field_id) AS field_ids, array_agg(value) AS field_values
    FROM contact_custom_fields WHERE contact_id = c.id AND custom_field_id = ANY($3::int[])
) AS f;

-- name: join_journey
-- Seed 003 §9: the batch's contacts with a journey channel ($3 ids, $4 values, pairwise) join the
-- journey classification of import $1; a link made before (a requeued run) is kept as it is.
INSERT INTO journey_contact (journey_classification_contact_id, client_id, contact_id,
                             contact_detail_id)
SELECT c.id, $2, d.contact_id, d.id
FROM journey_classification_contact c
CROSS JOIN unnest($3::bigint[], $4::text[]) AS l (contact_id, value)
JOIN contact_details d ON d.contact_id = l.contact_id AND d.channel_id = 4
                      AND d.value = l.value AND d.deleted_at IS NULL
WHERE c.import_job_id = $1
ON CONFLICT (journey_classification_contact_id, contact_detail_id) DO NOTHING;

-- name: analyze_contacts
-- Run by the importer as its inserts outgrow the statistics (autovacuum may be off or late).
-- Only `contact` is planned against (key lookups, updates by id); the other tables are reached
-- through their unique indexes, whatever their statistics say.
ANALYZE contact;

-- name: next_contact_ids
-- A constant regclass: pg_get_serial_sequence() here would run its catalog lookup per row.
SELECT nextval('contact_id_seq'::regclass) FROM generate_series(1, $1);

-- name: update_contacts
-- Only the values the file brings: a concurrent import's change to another column survives.
UPDATE contact c
SET name = coalesce(u.name, c.name),
    street_address = coalesce(u.street_address, c.street_address),
    updated_at = now()
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u (id, name, street_address)
WHERE c.id = u.id;

-- name: update_custom_values
-- MERGE's changed custom values of stored contacts (the new ones are COPY'd).
UPDATE contact_custom_fields f
SET value = u.value
FROM unnest($1::bigint[], $2::int[], $3::text[]) AS u (contact_id, custom_field_id, value)
WHERE f.contact_id = u.contact_id AND f.custom_field_id = u.custom_field_id;

-- name: create_custom_fields
-- Creates the client's missing fields; returns the new ones only.
INSERT INTO custom_field (client_id, name, import_job_id)
SELECT DISTINCT ON (lower(n)) $1, n, $3 FROM unnest($2::text[]) AS n ORDER BY lower(n), n
ON CONFLICT (client_id, lower(name)) DO NOTHING
RETURNING id;

-- name: custom_field_ids
-- A separate statement from the insert: its fresh snapshot sees fields that a concurrent
-- import created (and committed) while our insert waited on them.
SELECT lower(name) AS key, id FROM custom_field
WHERE client_id = $1 AND lower(name) = ANY(SELECT lower(n) FROM unnest($2::text[]) AS n);

-- name: insert_job
-- An in-process job ($24, the CLI's) is never claimed by a worker; it is created under the lease
-- of its process ($25 owner, $26 seconds), renewed by that process's heartbeat. $27: the local
-- file's absolute path.
INSERT INTO import_job (
    id, client_id, user_id, status, source, input_format, layout, conflict_strategy,
    chunk_size, partitions, has_internationalization, bytes_total, journey_id,
    auto_start_journey_mailing, source_size, source_sha256, filename, has_sensitive_data,
    has_underage_data, data_processing_purpose, lgpd_processing_hypothesis, tags, kind,
    in_process, lease_owner, lease_expires_at, local_path
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
        $20, $21, $22, $23, $24, $25,
        CASE WHEN $25::text IS NOT NULL THEN now() + make_interval(secs => $26) END, $27);

-- name: transition_job
-- The one guarded place where a job changes status; with an owner ($4), only while that worker
-- holds the job's lease.
UPDATE import_job
SET status = $2, updated_at = now(),
    started_at = CASE WHEN $2 = 'normalizing' THEN coalesce(started_at, now()) ELSE started_at END
WHERE id = $1 AND status = ANY($3::text[]) AND ($4::text IS NULL OR lease_owner = $4)
RETURNING status;

-- name: transition_client_job
-- transition_job for the API: scoped by client ($2); $5 records the object version verified.
UPDATE import_job
SET status = $3, updated_at = now(), storage_version = coalesce($5, storage_version)
WHERE id = $1 AND client_id = $2 AND status = ANY($4::text[])
RETURNING status;

-- name: start_job
-- uploaded → queued, or queued → queued recording the operation id ($3): one guarded statement.
-- Concurrent starts queue on the row lock; exactly one finds the job not yet queued, moves it
-- and wakes the workers (the notification is delivered at commit). $4: the allowed sources,
-- $5: the target ('queued'). No row: the job does not exist for this client; previous NULL:
-- current did not allow the start.
WITH current AS (
    SELECT id, status FROM import_job WHERE id = $1 AND client_id = $2
    FOR NO KEY UPDATE
),
moved AS (
    UPDATE import_job j
    SET status = $5, last_operation_id = coalesce($3, j.last_operation_id), updated_at = now()
    FROM current c
    WHERE j.id = c.id AND c.status = ANY($4::text[])
    RETURNING c.status AS previous
)
SELECT c.status AS current, m.previous,
       CASE WHEN m.previous <> $5 THEN pg_notify('importer_jobs', $1::text) END AS notified
FROM current c LEFT JOIN moved m ON true;

-- name: lock_client_job
-- The API's cancel and upload confirmation decide on the locked row; a claim (FOR UPDATE SKIP
-- LOCKED) passes over it meanwhile. NO KEY UPDATE: a running batch's KEY SHARE does not wait.
SELECT status, lease_owner, lease_expires_at, in_process FROM import_job
WHERE id = $1 AND client_id = $2
FOR NO KEY UPDATE;

-- name: request_cancel
-- The worker running the job sees it at its next lease renewal and stops between chunks.
UPDATE import_job
SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
WHERE id = $1;

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
WITH candidate AS (
    SELECT j.id FROM import_job j
    JOIN import_claim_queue q ON q.id = j.id
    WHERE j.status = ANY($4::text[])
      AND coalesce(j.lease_expires_at, '-infinity') <= now()
      AND q.leases < $3
    ORDER BY q.position
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE import_job j
SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $2), read_to_end_at = NULL
FROM candidate c
WHERE j.id = c.id
RETURNING j.*;

-- name: mark_read_to_end
-- The run's reader reached the end of the file: the phase `finalizing` (only while $2, when
-- given, holds the lease).
UPDATE import_job SET read_to_end_at = now()
WHERE id = $1 AND ($2::text IS NULL OR lease_owner = $2);

-- name: renew_lease
UPDATE import_job SET lease_expires_at = now() + make_interval(secs => $3)
WHERE id = $1 AND lease_owner = $2
RETURNING cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: release_lease
-- Expired at once: the next claim may take the job (and resume it).
UPDATE import_job SET lease_expires_at = now()
WHERE id = $1 AND lease_owner = $2;

-- name: view_job
-- A job with its progress (the import_job_progress view).
SELECT * FROM import_job_progress WHERE client_id = $1 AND id = $2;

-- name: list_jobs
-- History, newest first, one page after the keyset ($2, $3); $4: statuses or NULL for all.
-- Backward scan of import_job_client_history_idx.
SELECT * FROM import_job_progress
WHERE client_id = $1 AND (created_at, id) < ($2, $3)
  AND ($4::text[] IS NULL OR status = ANY($4::text[]))
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: list_user_jobs
-- list_jobs of one user ($6): backward scan of import_job_user_history_idx.
SELECT * FROM import_job_progress
WHERE client_id = $1 AND user_id = $6 AND (created_at, id) < ($2, $3)
  AND ($4::text[] IS NULL OR status = ANY($4::text[]))
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: view_any_job
-- view_job for the owner's command line (`importer status`): any client's job.
SELECT * FROM import_job_progress WHERE id = $1;

-- name: list_any_jobs
-- list_jobs for the owner's command line (`importer history` without --client-id): every
-- client's jobs after the keyset ($1, $2); $3: statuses or NULL; $5: one user or NULL for all.
SELECT * FROM import_job_progress
WHERE (created_at, id) < ($1, $2)
  AND ($3::text[] IS NULL OR status = ANY($3::text[]))
  AND ($5::text IS NULL OR user_id = $5)
ORDER BY created_at DESC, id DESC
LIMIT $4;

-- name: record_created_fields
UPDATE import_job SET created_custom_fields = created_custom_fields + $2 WHERE id = $1;

-- name: get_job
SELECT * FROM import_job WHERE id = $1;

-- name: add_job_warning
-- A file-level warning ($2 code, $3 message), once per code: a resumed or repeated run finding
-- it again adds nothing.
UPDATE import_job
SET warnings = warnings || jsonb_build_array(jsonb_build_object('code', $2::text, 'message', $3::text))
WHERE id = $1 AND NOT warnings @> jsonb_build_array(jsonb_build_object('code', $2::text));

-- name: job_warnings
SELECT warnings FROM import_job WHERE id = $1;

-- name: done_batches
SELECT chunk_no, partition, part FROM import_chunk WHERE job_id = $1;

-- name: open_lanes
-- The job's $2 lanes, each at the first chunk its partition has not committed whole (a resumed
-- job's ledger may already hold some); lanes that exist are left as they are.
INSERT INTO import_lane (job_id, partition, next_chunk)
SELECT $1, p, (
    SELECT coalesce(max(done.chunk_no) + 1, 0)
    FROM (
        SELECT chunk_no, row_number() OVER (ORDER BY chunk_no) - 1 AS rank
        FROM import_chunk
        WHERE job_id = $1 AND partition = p AND part = 1
    ) done
    WHERE done.chunk_no = done.rank
)
FROM generate_series(0, $2 - 1) AS p
ON CONFLICT (job_id, partition) DO NOTHING;

-- name: enter_lane
-- First in a whole batch's transaction: moves lane $2 of job $1 past chunk $3 if it stands at
-- it and nobody is splitting that chunk's batch. The row stays locked until the batch commits:
-- the next chunk's batch waits on it here and then finds the lane at its chunk. No row: the
-- lane is elsewhere, or the batch goes in by pieces (lane_position tells).
UPDATE import_lane SET next_chunk = $3 + 1
WHERE job_id = $1 AND partition = $2 AND next_chunk = $3
  AND split_chunk IS DISTINCT FROM $3
RETURNING next_chunk;

-- name: enter_lane_piece
-- First in a split piece's transaction: the lane must stand at the piece's chunk; marks (and
-- locks) it as going in by pieces, so no whole apply of the batch can follow. advance_lane
-- moves it on after the last piece.
UPDATE import_lane SET split_chunk = $3
WHERE job_id = $1 AND partition = $2 AND next_chunk = $3
RETURNING next_chunk;

-- name: advance_lane
UPDATE import_lane SET next_chunk = $3 + 1
WHERE job_id = $1 AND partition = $2 AND next_chunk = $3
RETURNING next_chunk;

-- name: lane_position
SELECT next_chunk, split_chunk FROM import_lane WHERE job_id = $1 AND partition = $2;

-- name: batch_parts
SELECT part FROM import_chunk WHERE job_id = $1 AND chunk_no = $2 AND partition = $3;

-- name: lanes_behind
-- The chunk every lane of the job has passed: the coordinator's progress and end condition.
SELECT min(next_chunk) FROM import_lane WHERE job_id = $1;

-- name: lock_job
-- Before a finalization that batches of other instances may race: waits for the batches in
-- flight (they hold the job FOR KEY SHARE) so the totals read next include them; later ones
-- then find the job final and are refused.
SELECT status FROM import_job WHERE id = $1 FOR UPDATE;

-- name: try_client_turn
-- Imports of one client apply one at a time (SPEC: concurrent imports of a client end as some
-- serial order of them): a session advisory lock per client, in its own key space ($1).
SELECT pg_try_advisory_lock(1243542, $1);

-- name: release_client_turn
SELECT pg_advisory_unlock(1243542, $1);

-- name: checkpoint
-- Where a resumed run starts reading: the last chunk of the prefix 0..c that every one of the
-- $2 partitions committed whole (part 1, done or discarded), with the reader's position after
-- it. No row when chunk 0 is not whole (or the ledger predates end_line).
WITH whole AS (
    SELECT chunk_no, min(end_offset) AS end_offset, min(end_line) AS end_line
    FROM import_chunk
    WHERE job_id = $1 AND part = 1
    GROUP BY chunk_no
    HAVING count(*) = $2 AND count(end_line) = $2
),
prefix AS (
    SELECT chunk_no, end_offset, end_line,
           chunk_no + 1 - row_number() OVER (ORDER BY chunk_no) AS gap
    FROM whole
)
SELECT chunk_no, end_offset, end_line FROM prefix WHERE gap = 0
ORDER BY chunk_no DESC
LIMIT 1;

-- name: synchronous_commit
SET LOCAL synchronous_commit = on;

-- name: finalize_job
-- Exactly once: the guarded status update, the finalization row (its primary key) and the
-- outbox rows commit together; a second caller finds no row to update and writes nothing.
-- $2: the target (failed, cancelled or completed: completed_with_placeholders when the import
-- created custom fields); $5: the statuses it may come from; $6: the worker whose lease must
-- be held (NULL: an in-process run or the API, unfenced).
-- A cancelled import gets the notification `import_cancelled` with its truthful counters; like
-- a failed one, it neither moves its journey classification nor releases its firing intents.
-- One finalization per run: the guarded update leaves the running statuses once, and only a
-- requeue (requeue_job) brings the job back, as its next run, deleting the finalization row in
-- the same statement. The notification and stats-refresh ids carry the run from the second on
-- (`notification:<job>:2`): one message per finalization, the UNIQUE message_id refusing any
-- second. Firing ids need none: an intent is released once ever (released_at).
WITH totals AS (
    SELECT coalesce(sum(rows_read), 0) AS rows_read, coalesce(sum(inserted), 0) AS inserted,
           coalesce(sum(updated), 0) AS updated, coalesce(sum(invalid), 0) AS invalid,
           coalesce(sum(error), 0) AS error, coalesce(sum(ignored), 0) AS ignored
    FROM import_chunk WHERE job_id = $1
),
job AS (
    UPDATE import_job j
    SET status = CASE WHEN $2 IN ('failed', 'cancelled') THEN $2
                      WHEN j.created_custom_fields > 0 THEN 'completed_with_placeholders'
                      ELSE 'completed' END,
        fail_reason = $3,
        rows_read = t.rows_read, inserted = t.inserted, updated = t.updated,
        invalid = t.invalid, error = t.error, ignored = t.ignored,
        finished_at = $4, updated_at = $4
    FROM totals t
    WHERE j.id = $1 AND j.status = ANY($5::text[]) AND ($6::text IS NULL OR j.lease_owner = $6)
    RETURNING j.*
),
finalized AS (
    INSERT INTO import_batch_finalized
        (batch_id, user_id, client_id, total, imported, updated, failed, finalized_at)
    SELECT id, user_id, client_id, rows_read, inserted, updated, invalid + error, $4 FROM job
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING batch_id
),
notification AS (
    INSERT INTO outbox (message_id, topic, payload)
    SELECT 'notification:' || j.id
               || CASE WHEN j.run_generation > 1 THEN ':' || j.run_generation ELSE '' END,
           'notification',
           jsonb_build_object(
               'type', CASE WHEN j.status = 'failed' THEN 'import_failed'
                            WHEN j.status = 'cancelled' THEN 'import_cancelled'
                            WHEN j.invalid + j.error = 0 THEN 'import_done'
                            ELSE 'import_partial' END,
               'job_id', j.id, 'client_id', j.client_id, 'user_id', j.user_id,
               'status', j.status, 'fail_reason', j.fail_reason,
               'rows_read', j.rows_read, 'inserted', j.inserted, 'updated', j.updated,
               'invalid', j.invalid, 'error', j.error, 'ignored', j.ignored)
    FROM job j JOIN finalized f ON f.batch_id = j.id
),
journey AS (
    UPDATE journey_classification_contact c
    SET status = CASE WHEN c.auto_start_journey_mailing THEN 'ACTIVE' ELSE 'PAUSED' END,
        contact_amount = j.inserted + j.updated, updated_at = $4
    FROM job j JOIN finalized f ON f.batch_id = j.id
    WHERE c.import_job_id = j.id AND c.status = 'AWAITING_IMPORT'
      AND j.status NOT IN ('failed', 'cancelled')
),
firing AS (
    UPDATE firing_intent i SET released_at = $4
    FROM job j JOIN finalized f ON f.batch_id = j.id
    WHERE i.import_job_id = j.id AND i.released_at IS NULL
      AND j.status NOT IN ('failed', 'cancelled')
    RETURNING i.id, i.kind
),
released AS (
    INSERT INTO outbox (message_id, topic, payload)
    SELECT 'firing:' || id,
           CASE WHEN kind = 'sms' THEN 'sms/firing-intent' ELSE 'hsm/importing-intent' END,
           CASE WHEN kind = 'email' THEN jsonb_build_object('id', id, 'channelId', 3)
                ELSE jsonb_build_object('id', id) END
    FROM firing
),
follow_up AS (
    -- Seed 001's follow-up job: the client's contact statistics are refreshed after an import
    -- that wrote rows (not after a failed or cancelled one).
    INSERT INTO outbox (message_id, topic, payload)
    SELECT 'stats-refresh:' || j.id
               || CASE WHEN j.run_generation > 1 THEN ':' || j.run_generation ELSE '' END,
           'contact-import/stats-refresh',
           jsonb_build_object('job_id', j.id, 'client_id', j.client_id)
    FROM job j JOIN finalized f ON f.batch_id = j.id
    WHERE j.status NOT IN ('failed', 'cancelled')
)
SELECT j.status, j.rows_read, j.inserted, j.updated, j.invalid, j.error, j.ignored
FROM job j JOIN finalized f ON f.batch_id = j.id;

-- owner operations (seed 001's runbook: remove an import's data, requeue it)
-- $2: the client, or NULL for the command line (an operator acts on any client's job).

-- name: lock_admin_job
-- FOR UPDATE: waits for anything still writing to the job, and keeps claims off it.
SELECT client_id, status, run_generation, data_removed_at IS NOT NULL AS data_removed,
       coalesce(lease_expires_at > now(), false) AS lease_live, in_process
FROM import_job
WHERE id = $1 AND ($2::integer IS NULL OR client_id = $2)
FOR UPDATE;

-- name: requeue_job
-- The job's next run, for the workers: back to queued ($3: the allowed sources,
-- lifecycle.requeue_sources; the caller checked the lease of a running one under lock_admin_job)
-- with its file (stored, or the command line's local_path), sealed size and sha256 and its chunk
-- ledger (the run resumes from it); lease, cancel request, fail reason and end are cleared, and a
-- command-line import becomes the workers' (in_process). An ended job ($5: the ended statuses)
-- starts its next run: run_generation + 1, and the previous run's finalization row goes in the
-- same statement, so the next run finalizes exactly once; its outbox rows stay (they were that
-- run's messages). An abandoned job (running, its lease expired) was never finalized: its run
-- goes on. $4: the operation id. The workers are woken at commit.
WITH moved AS (
    UPDATE import_job
    SET status = 'queued',
        run_generation = run_generation + CASE WHEN status = ANY($5::text[]) THEN 1 ELSE 0 END,
        fail_reason = NULL, lease_owner = NULL, lease_expires_at = NULL,
        cancel_requested_at = NULL, in_process = false,
        started_at = NULL, finished_at = NULL, data_removed_at = NULL,
        rows_read = 0, inserted = 0, updated = 0, invalid = 0, error = 0, ignored = 0,
        last_operation_id = $4, updated_at = now()
    WHERE id = $1 AND ($2::integer IS NULL OR client_id = $2) AND status = ANY($3::text[])
    RETURNING id, run_generation
),
forgotten AS (
    DELETE FROM import_batch_finalized f USING moved m WHERE f.batch_id = m.id
    RETURNING f.batch_id
)
SELECT m.run_generation, (SELECT count(*) FROM forgotten) AS finalizations_removed,
       pg_notify('importer_jobs', m.id::text) AS notified
FROM moved m;

-- name: take_over_job
-- `importer job resume`: the job's next run in this process, under its lease ($3 owner, $4
-- seconds), on the row lock_admin_job locked and lifecycle.requeue_refusal accepted. As in
-- requeue_job, an ended job ($2: the ended statuses) goes back to queued as its next run
-- (run_generation + 1, its finalization row deleted in the same statement) and an abandoned one
-- keeps its status and its run (it was never finalized). $5: the operation id.
WITH moved AS (
    UPDATE import_job
    SET status = CASE WHEN status = ANY($2::text[]) THEN 'queued' ELSE status END,
        run_generation = run_generation + CASE WHEN status = ANY($2::text[]) THEN 1 ELSE 0 END,
        started_at = CASE WHEN status = ANY($2::text[]) THEN NULL ELSE started_at END,
        fail_reason = NULL, cancel_requested_at = NULL, finished_at = NULL,
        data_removed_at = NULL,
        rows_read = 0, inserted = 0, updated = 0, invalid = 0, error = 0, ignored = 0,
        in_process = true, lease_owner = $3, lease_expires_at = now() + make_interval(secs => $4),
        last_operation_id = $5, updated_at = now()
    WHERE id = $1
    RETURNING *
),
forgotten AS (
    DELETE FROM import_batch_finalized f USING moved m WHERE f.batch_id = m.id
)
SELECT * FROM moved;

-- name: remove_job_contacts
-- The contacts the import created ($1; provenance import_job_id), soft-deleted with their
-- channels at $3; their custom values stay with them. Reached through the client's key index
-- ($2: the job's client): no index on import_job_id slows every import's inserts for this rare
-- operation. A repeat finds nothing left to remove.
WITH removed AS (
    UPDATE contact SET deleted_at = $3, updated_at = $3
    WHERE client_id = $2 AND cpf_cnpj IS NOT NULL AND import_job_id = $1 AND deleted_at IS NULL
    RETURNING id
),
details AS (
    UPDATE contact_details d SET deleted_at = $3
    FROM removed r
    WHERE d.contact_id = r.id AND d.deleted_at IS NULL
    RETURNING d.id
)
SELECT (SELECT count(*) FROM removed) AS contacts, (SELECT count(*) FROM details) AS details;

-- name: clear_job_ledger
-- The run's ledger, lanes and per-row report go with the data: a requeue then reads the whole
-- file again (with the ledger kept it would find every chunk done and import nothing), and the
-- report's raw values are the file's data too.
WITH chunks AS (
    DELETE FROM import_chunk WHERE job_id = $1 RETURNING 1
),
lanes AS (
    DELETE FROM import_lane WHERE job_id = $1
),
row_errors AS (
    DELETE FROM import_row_error WHERE job_id = $1 RETURNING 1
)
SELECT (SELECT count(*) FROM chunks) AS chunks, (SELECT count(*) FROM row_errors) AS row_errors;

-- name: mark_data_removed
UPDATE import_job SET data_removed_at = coalesce(data_removed_at, $2), updated_at = $2
WHERE id = $1
RETURNING client_id, data_removed_at;

-- name: job_statuses
-- The dead-letter tools' look-up: the status of each job named by a message ($1), of the
-- client $2 (NULL: any).
SELECT id, client_id, status FROM import_job
WHERE id = ANY($1::uuid[]) AND ($2::integer IS NULL OR client_id = $2);

-- name: row_errors
SELECT line, column_name, reason, severity, value
FROM import_row_error WHERE job_id = $1
ORDER BY line, column_name NULLS FIRST, reason;

-- layouts (API)
-- Every statement is scoped by client_id ($1): another tenant's layout is simply not found.
-- Only layouts with a document (made through the API) are served.

-- name: insert_layout
INSERT INTO import_layout (client_id, name, delimiter, encoding, has_header, document)
VALUES ($1, $2, $3, $4, $5, $6::jsonb)
RETURNING id, name, document::text AS document, created_at, updated_at;

-- name: get_layout
SELECT id, name, document::text AS document, created_at, updated_at
FROM import_layout WHERE client_id = $1 AND id = $2 AND document IS NOT NULL;

-- name: list_layouts
SELECT id, name, document::text AS document, created_at, updated_at
FROM import_layout WHERE client_id = $1 AND document IS NOT NULL
ORDER BY id LIMIT $2;

-- name: update_layout
UPDATE import_layout
SET name = $3, delimiter = $4, encoding = $5, has_header = $6, document = $7::jsonb,
    updated_at = now()
WHERE client_id = $1 AND id = $2 AND document IS NOT NULL
RETURNING id, name, document::text AS document, created_at, updated_at;

-- name: delete_layout
DELETE FROM import_layout WHERE client_id = $1 AND id = $2 AND document IS NOT NULL
RETURNING id;

-- name: journey_exists
SELECT EXISTS (SELECT 1 FROM journey WHERE id = $2 AND client_id = $1);

-- name: insert_firing_intent
-- Seed 003 §10: held until the import completes; finalize_job releases it to its queue.
INSERT INTO firing_intent (client_id, kind, import_job_id, params)
VALUES ($1, $2, $3, $4::jsonb);

-- name: insert_journey_classification
-- Seed 003 §9: the journey's mailing waits for the import; finalize_job moves it on.
INSERT INTO journey_classification_contact
    (journey_id, client_id, import_job_id, description, status, auto_start_journey_mailing)
VALUES ($1, $2, $3, $4, 'AWAITING_IMPORT', $5)
ON CONFLICT (import_job_id) DO NOTHING;

-- name: ping
SELECT 1;

-- outbox relay
-- The relay's batch, locked until its transaction ends: rows of the known topics ($1) in id
-- order, skipping those another relay holds. Rows of other topics stay unpublished (the relay
-- reports them with unknown_outbox_topics); filtering them here keeps them from filling every
-- batch and stalling the known ones behind them.

-- name: lock_outbox
SELECT id, message_id, topic, payload::text AS payload
FROM outbox
WHERE published_at IS NULL AND topic = ANY($1::text[])
ORDER BY id
LIMIT $2
FOR UPDATE SKIP LOCKED;

-- name: mark_outbox_published
UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[]);

-- name: unknown_outbox_topics
SELECT topic, count(*) AS messages
FROM outbox
WHERE published_at IS NULL AND NOT (topic = ANY($1::text[]))
GROUP BY topic
ORDER BY topic;
