-- The columns step (issue 29): the client's custom fields and memory, a job's mapping, the
-- memory's updates. Named queries, loaded once with every queries/*.sql by
-- importer/sql/__init__.py. Every statement is scoped by the tenant's client_id.

-- name: client_custom_fields
SELECT id, name FROM custom_field WHERE client_id = $1 ORDER BY id LIMIT $2;

-- name: client_column_memory
-- Per header, the target most used (the latest on a tie) first.
SELECT header_key, target, uses, last_used_at FROM import_column_memory
WHERE client_id = $1
ORDER BY header_key, uses DESC, last_used_at DESC, target
LIMIT $2;

-- name: set_job_columns
-- The mapping of a job not started yet ($3: the statuses it may be in): its layout ($4) and the
-- pairs its completion will remember ($5). No row: not found, or started (the caller tells).
UPDATE import_job SET layout = $4::jsonb, column_mapping = $5::jsonb, updated_at = now()
WHERE id = $1 AND client_id = $2 AND status = ANY($3::text[])
RETURNING id;

-- name: remember_job_columns
-- At a completed finalization, in its transaction: the job's pairs counted into its client's
-- memory, once per job (a requeued run that completes again adds nothing).
WITH job AS (
    UPDATE import_job SET columns_remembered_at = now()
    WHERE id = $1 AND column_mapping IS NOT NULL AND columns_remembered_at IS NULL
      AND status IN ('completed', 'completed_with_placeholders')
    RETURNING client_id, column_mapping
)
INSERT INTO import_column_memory AS m (client_id, header_key, target, uses, last_used_at)
SELECT j.client_id, p.pair->>0, p.pair->>1, 1, now()
FROM job j, jsonb_array_elements(j.column_mapping) AS p(pair)
ON CONFLICT (client_id, header_key, target)
DO UPDATE SET uses = m.uses + 1, last_used_at = greatest(m.last_used_at, excluded.last_used_at);

-- name: forget_job_columns
-- Remove-data and retention: the job's pairs taken back out of its client's memory (an entry
-- no import uses any more goes); a repeat takes nothing.
WITH job AS (
    UPDATE import_job SET columns_remembered_at = NULL
    WHERE id = $1 AND columns_remembered_at IS NOT NULL
    RETURNING client_id, column_mapping
),
pairs AS (
    SELECT j.client_id, p.pair->>0 AS header_key, p.pair->>1 AS target
    FROM job j, jsonb_array_elements(j.column_mapping) AS p(pair)
),
lowered AS (
    UPDATE import_column_memory m SET uses = m.uses - 1
    FROM pairs p
    WHERE m.client_id = p.client_id AND m.header_key = p.header_key AND m.target = p.target
      AND m.uses > 1
    RETURNING 1
)
DELETE FROM import_column_memory m USING pairs p
WHERE m.client_id = p.client_id AND m.header_key = p.header_key AND m.target = p.target
  AND m.uses = 1;

-- name: clear_column_memory
-- The user's "forget": every entry of the client's memory.
DELETE FROM import_column_memory WHERE client_id = $1;
