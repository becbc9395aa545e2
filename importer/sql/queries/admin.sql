-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- owner operations (seed 001's runbook: remove an import's data, requeue it)
-- $2: the client, or NULL for the command line (an operator acts on any client's job).

-- name: lock_admin_job
-- FOR UPDATE: waits for anything still writing to the job, and keeps claims off it.
SELECT client_id, status, run_generation, data_removed_at IS NOT NULL AS data_removed,
       coalesce(lease_expires_at > now(), false) AS lease_live, in_process, awaiting_apply
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
-- goes on. A preview never applied (cancelled, expired, failed) forgets its document: its next
-- run previews again (it would otherwise import what nobody applied). $4: the operation id. The
-- workers are woken at commit.
WITH moved AS (
    UPDATE import_job
    SET status = 'queued',
        run_generation = run_generation + CASE WHEN status = ANY($5::text[]) THEN 1 ELSE 0 END,
        validation = CASE WHEN status = ANY($5::text[]) THEN NULL ELSE validation END,
        preview = CASE WHEN preview_applied_at IS NULL THEN NULL ELSE preview END,
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
        validation = CASE WHEN status = ANY($2::text[]) THEN NULL ELSE validation END,
        preview = CASE WHEN preview_applied_at IS NULL THEN NULL ELSE preview END,
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

-- name: remove_job_contacts_without_cpf
-- remove_job_contacts for the contacts without a CPF/CNPJ the import created (an import keyed
-- by a channel, core.keys), found by the ids its batches journaled (import_journal.created).
WITH removed AS (
    UPDATE contact SET deleted_at = $3, updated_at = $3
    WHERE id = ANY(ARRAY(SELECT unnest(created) FROM import_journal WHERE job_id = $1))
      AND client_id = $2 AND cpf_cnpj IS NULL AND import_job_id = $1 AND deleted_at IS NULL
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
-- The run's ledger, lanes, key groups, merge marks, undo journal, per-row and duplicate reports
-- go with the data: a requeue then reads the whole file again (with the ledger kept it would
-- find every chunk done and import nothing; with the marks, a merge policy would take the
-- removed run's values for its own), and the reports' raw values are the file's data too.
WITH chunks AS (
    DELETE FROM import_chunk WHERE job_id = $1 RETURNING 1
),
lanes AS (
    DELETE FROM import_lane WHERE job_id = $1
),
key_groups AS (
    DELETE FROM import_key_groups WHERE job_id = $1
),
row_errors AS (
    DELETE FROM import_row_error WHERE job_id = $1 RETURNING 1
),
error_tally AS (  -- the report's cap counts afresh
    DELETE FROM import_error_tally WHERE job_id = $1
),
marks AS (
    DELETE FROM import_merge_mark WHERE job_id = $1
),
journal AS (
    DELETE FROM import_journal WHERE job_id = $1
),
duplicates AS (
    DELETE FROM import_duplicate WHERE job_id = $1
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
