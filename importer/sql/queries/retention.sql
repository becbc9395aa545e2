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
-- lines and reasons stay), its duplicate report, a channel key's groups, its undo journal and
-- merge marks; then the job says when ($2). A repeat purges nothing more. A job being undone is
-- left alone (catalog T41): its journal is the running undo's ledger. The row lock orders it
-- with the undo: an undo that began first is seen (undoing: nothing purged, a later sweep
-- purges the undone job); a purge that came first makes the undo answer retention_expired.
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
)
SELECT (SELECT count(*) FROM job) AS jobs,
       (SELECT count(*) FROM raw_values) + (SELECT count(*) FROM duplicates)
       + (SELECT count(*) FROM key_groups) AS raw_values,
       (SELECT count(*) FROM journal) + (SELECT count(*) FROM marks) AS journal_rows;
