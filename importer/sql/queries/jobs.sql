-- The job rows: created, moved through their statuses, warned, finalized.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- name: insert_job
-- An in-process job ($24, the CLI's) is never claimed by a worker; it is created under the lease
-- of its process ($25 owner, $26 seconds), renewed by that process's heartbeat. $27: the local
-- file's absolute path. $28: a preview first; $29: the error threshold; $30: the completion
-- webhook's target (NULL: the client's default, if any); $31: the duplicate report; $32: the
-- undo journal (IMPORTER_UNDO_JOURNAL).
INSERT INTO import_job (
    id, client_id, user_id, status, source, input_format, layout, conflict_strategy,
    chunk_size, partitions, has_internationalization, bytes_total, journey_id,
    auto_start_journey_mailing, source_size, source_sha256, filename, has_sensitive_data,
    has_underage_data, data_processing_purpose, lgpd_processing_hypothesis, tags, kind,
    in_process, lease_owner, lease_expires_at, local_path, preview_requested, max_invalid,
    notify_url, duplicates_report, journaled
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
        $20, $21, $22, $23, $24, $25,
        CASE WHEN $25::text IS NOT NULL THEN now() + make_interval(secs => $26) END, $27,
        $28, $29, $30, $31, $32);

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
SELECT status, lease_owner, lease_expires_at, in_process, awaiting_apply FROM import_job
WHERE id = $1 AND client_id = $2
FOR NO KEY UPDATE;

-- name: request_cancel
-- The worker running the job sees it at its next lease renewal and stops between chunks.
UPDATE import_job
SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
WHERE id = $1;

-- name: mark_read_to_end
-- The run's reader reached the end of the file: the phase `finalizing` (only while $2, when
-- given, holds the lease).
UPDATE import_job SET read_to_end_at = now()
WHERE id = $1 AND ($2::text IS NULL OR lease_owner = $2);

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

-- name: lock_job
-- Before a finalization that batches of other instances may race: waits for the batches in
-- flight (they hold the job FOR KEY SHARE) so the totals read next include them; later ones
-- then find the job final and are refused.
SELECT status FROM import_job WHERE id = $1 FOR UPDATE;

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
-- A job whose validation exceeded its error threshold applied no batch: its counts are the
-- validation's (every row read, the invalid ones invalid, the valid ones ignored: unwritten).
WITH totals AS (
    SELECT coalesce(sum(rows_read), 0) AS rows_read, coalesce(sum(inserted), 0) AS inserted,
           coalesce(sum(updated), 0) AS updated, coalesce(sum(invalid), 0) AS invalid,
           coalesce(sum(error), 0) AS error, coalesce(sum(ignored), 0) AS ignored
    FROM (
        SELECT rows_read, inserted, updated, invalid, error, ignored
        FROM import_chunk WHERE job_id = $1
        UNION ALL
        SELECT (validation->>'rows_read')::bigint, 0, 0, (validation->>'invalid')::bigint, 0,
               (validation->>'rows_read')::bigint - (validation->>'invalid')::bigint
        FROM import_job WHERE id = $1 AND (validation->>'exceeded')::boolean
    ) counted
),
-- A completed run none of whose batches wrote a row (every one failed: its rows all `error`)
-- ends failed, all_batches_failed (issue 25).
all_failed AS (
    SELECT $2 = 'completed' AND t.error > 0 AND t.inserted + t.updated + t.ignored = 0 AS yes
    FROM totals t
),
job AS (
    UPDATE import_job j
    SET status = CASE WHEN $2 IN ('failed', 'cancelled') THEN $2
                      WHEN a.yes THEN 'failed'
                      WHEN j.created_custom_fields > 0 THEN 'completed_with_placeholders'
                      ELSE 'completed' END,
        fail_reason = CASE WHEN a.yes THEN 'all_batches_failed' ELSE $3 END,
        rows_read = t.rows_read, inserted = t.inserted, updated = t.updated,
        invalid = t.invalid, error = t.error, ignored = t.ignored,
        awaiting_apply = false, finished_at = $4, updated_at = $4
    FROM totals t, all_failed a
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
webhook AS (
    -- The completion webhook (the job's notify_url, else its client's default): one delivery
    -- per finalization under the notification's message id, delivered by the workers.
    INSERT INTO webhook_delivery (delivery_id, job_id, client_id, event, url)
    SELECT 'notification:' || j.id
               || CASE WHEN j.run_generation > 1 THEN ':' || j.run_generation ELSE '' END,
           j.id, j.client_id,
           CASE WHEN j.status = 'failed' THEN 'import_failed'
                WHEN j.status = 'cancelled' THEN 'import_cancelled'
                WHEN j.invalid + j.error = 0 THEN 'import_done'
                ELSE 'import_partial' END,
           coalesce(j.notify_url, w.notify_url)
    FROM job j JOIN finalized f ON f.batch_id = j.id
    LEFT JOIN client_webhook w ON w.client_id = j.client_id
    WHERE coalesce(j.notify_url, w.notify_url) IS NOT NULL
    ON CONFLICT (delivery_id) DO NOTHING
),
journey AS (
    UPDATE journey_classification_contact c
    SET status = CASE WHEN c.auto_start_journey_mailing THEN 'ACTIVE' ELSE 'PAUSED' END,
        -- the classification's contacts: distinct ones (a contact may have several links)
        contact_amount = (SELECT count(DISTINCT l.contact_id) FROM journey_contact l
                          WHERE l.journey_classification_contact_id = c.id),
        updated_at = $4
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

-- name: lock_preview
-- An apply decides on the locked row (lifecycle.apply_action); $2: the client (NULL: the
-- owner's command line, any client's job).
SELECT status, preview_requested, awaiting_apply,
       coalesce(preview_expires_at <= now(), false) AS expired
FROM import_job
WHERE id = $1 AND ($2::integer IS NULL OR client_id = $2)
FOR NO KEY UPDATE;

-- name: apply_preview
-- The preview handed to its next run (a claim, or `importer job apply`): no longer awaiting its
-- apply; the workers are woken at commit. $2: the operation id. $3: an apply through the API,
-- whose run is the workers' even for a command line's dry run (in_process: no worker would
-- claim it, as a requeue makes it theirs too).
UPDATE import_job
SET awaiting_apply = false, preview_applied_at = now(),
    in_process = in_process AND NOT $3,
    last_operation_id = coalesce($2, last_operation_id), updated_at = now()
WHERE id = $1 AND awaiting_apply
RETURNING pg_notify('importer_jobs', id::text);

-- name: expired_previews
-- Previews that waited past their time to live, oldest first ($1 at most).
SELECT id FROM import_job
WHERE awaiting_apply AND preview_expires_at <= now()
ORDER BY preview_expires_at
LIMIT $1;
