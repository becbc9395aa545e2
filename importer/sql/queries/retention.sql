-- Retention (issue 15 point 4, LGPD): the personal data of imports that ended long enough ago.
-- Named queries, loaded once with every queries/*.sql.

-- name: retention_due
-- Ended imports ($2: the ended statuses) whose end is before $1 and whose data is not purged
-- yet, oldest first, at most $3: their source (an upload's object key) and local path.
SELECT id, source, local_path FROM import_job
WHERE finished_at < $1 AND purged_at IS NULL AND status = ANY($2::text[])
ORDER BY finished_at
LIMIT $3;

-- name: purge_job
-- One import's personal data, in one transaction: the raw values of its error report (the
-- lines and reasons stay, at most IMPORTER_MAX_ROW_ERRORS), its duplicate report, a channel
-- key's groups, its undo journal and merge marks; and its chunk ledger and lanes (issue 26: a
-- row per batch; its counters are on the job, and a failed or cancelled import resumed or
-- requeued after it reads its file from the start); then the job says when ($2). A repeat
-- purges nothing more. A job being undone is left alone (catalog T41): its journal is the
-- running undo's ledger. The row lock orders it with the undo: an undo that began first is
-- seen (undoing: nothing purged, a later sweep purges the undone job); a purge that came first
-- makes the undo answer retention_expired.
WITH job AS (
    UPDATE import_job SET purged_at = $2, updated_at = $2
    WHERE id = $1 AND purged_at IS NULL AND status <> 'undoing'
    RETURNING id
),
raw_values AS (
    UPDATE import_row_error e SET value = NULL
    FROM job j WHERE e.job_id = j.id AND e.value IS NOT NULL
    RETURNING 1
),
duplicates AS (
    DELETE FROM import_duplicate d USING job j WHERE d.job_id = j.id RETURNING 1
),
key_groups AS (  -- a channel key's values (core.keys.KeyGroups)
    DELETE FROM import_key_groups g USING job j WHERE g.job_id = j.id RETURNING 1
),
journal AS (  -- one row per batch
    DELETE FROM import_journal x USING job j WHERE x.job_id = j.id RETURNING 1
),
marks AS (
    DELETE FROM import_merge_mark x USING job j WHERE x.job_id = j.id RETURNING 1
),
ledger AS (
    DELETE FROM import_chunk c USING job j WHERE c.job_id = j.id RETURNING 1
),
lanes AS (
    DELETE FROM import_lane l USING job j WHERE l.job_id = j.id RETURNING 1
)
SELECT (SELECT count(*) FROM job) AS jobs,
       (SELECT count(*) FROM raw_values) + (SELECT count(*) FROM duplicates)
       + (SELECT count(*) FROM key_groups) AS raw_values,
       (SELECT count(*) FROM journal) + (SELECT count(*) FROM marks) AS journal_rows,
       (SELECT count(*) FROM ledger) + (SELECT count(*) FROM lanes) AS ledger_rows;

-- name: sweep_outbox
-- Bounded tables (issue 26): at most $2 outbox messages published before $1, oldest first, in
-- one short transaction (the caller repeats while a batch comes back full). $3: the messages
-- never published too, created before $1 (a deployment without a broker has no relay: nobody
-- will publish them).
WITH due AS (
    (SELECT id FROM outbox WHERE published_at < $1 ORDER BY published_at LIMIT $2)
    UNION
    (SELECT id FROM outbox WHERE $3 AND published_at IS NULL AND created_at < $1
     ORDER BY id LIMIT $2)
),
gone AS (
    DELETE FROM outbox o USING (SELECT id FROM due ORDER BY id LIMIT $2) d
    WHERE o.id = d.id
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: sweep_webhooks
-- At most $2 webhook deliveries that ended (delivered or given up) before $1, oldest first,
-- with their attempts (ON DELETE CASCADE: at most IMPORTER_WEBHOOK_MAX_ATTEMPTS each).
WITH due AS (
    SELECT id FROM webhook_delivery
    WHERE (delivered_at IS NOT NULL OR gave_up_at IS NOT NULL)
      AND coalesce(delivered_at, gave_up_at) < $1
    ORDER BY coalesce(delivered_at, gave_up_at)
    LIMIT $2
),
gone AS (
    DELETE FROM webhook_delivery w USING due WHERE w.id = due.id RETURNING 1
)
SELECT count(*) FROM gone;
