-- What the API and the command line read of jobs: the progress views, history pages, row report.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- name: view_job
-- A job with its progress (the import_job_progress view).
SELECT * FROM import_job_progress WHERE client_id = $1 AND id = $2;

-- name: list_jobs
-- History, newest first, one page after the keyset ($2, $3); $4: statuses or NULL for all.
-- Backward scan of import_job_client_history_idx. The listing has no queue position: the
-- page's queued jobs are placed at once after it (queue_positions).
SELECT * FROM import_job_listing
WHERE client_id = $1 AND (created_at, id) < ($2, $3)
  AND ($4::text[] IS NULL OR status = ANY($4::text[]))
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: list_user_jobs
-- list_jobs of one user ($6): backward scan of import_job_user_history_idx.
SELECT * FROM import_job_listing
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
SELECT * FROM import_job_listing
WHERE (created_at, id) < ($1, $2)
  AND ($3::text[] IS NULL OR status = ANY($3::text[]))
  AND ($5::text IS NULL OR user_id = $5)
ORDER BY created_at DESC, id DESC
LIMIT $4;

-- name: queue_positions
-- The places of the queued jobs $1 in the claim's order (a history page's: import_queue_positions
-- numbers the queue once for all of them); a job not waiting has no row.
SELECT job_id, job_position FROM import_queue_positions($1::uuid[]);

-- name: row_errors
SELECT line, column_name, reason, severity, value
FROM import_row_error WHERE job_id = $1
ORDER BY line, column_name NULLS FIRST, reason;

-- name: duplicate_rows
-- The duplicate-resolution report's competitions, a (key, field)'s in batch order
-- (core.duplicates combines them into one row); losing_lines as JSON text. With them, the
-- sources of the (key, field)s that compete (rule 'source': the line that gave the value an
-- earlier batch wrote without a competition), so a later competition names that line.
WITH competitions AS MATERIALIZED (
    SELECT e ->> 0 AS key, e ->> 1 AS field, e ->> 2 AS winner_value,
           (e ->> 3)::integer AS winner_line, e ->> 4 AS losing_lines,
           (e ->> 5)::boolean AS loser_stored, e ->> 6 AS rule, d.chunk_no, d.batch_line
    FROM import_duplicate d
    CROSS JOIN LATERAL json_array_elements(convert_from(d.competitions, 'UTF8')::json) AS e
    WHERE d.job_id = $1
),
competing AS MATERIALIZED (SELECT DISTINCT key, field FROM competitions),
sources AS (  -- [key, line, fields]; no fields: a new key's row, every field that competes
    SELECT c.key, c.field, NULL::text AS winner_value,
           (s ->> 1)::integer AS winner_line, '[]' AS losing_lines, false AS loser_stored,
           'source' AS rule, d.chunk_no, d.batch_line
    FROM import_duplicate d
    CROSS JOIN LATERAL json_array_elements(convert_from(d.sources, 'UTF8')::json) AS s
    JOIN competing c
      ON c.key = s ->> 0
     AND (json_array_length(s -> 2) = 0
          OR c.field IN (SELECT json_array_elements_text(s -> 2)))
    WHERE d.job_id = $1 AND d.sources IS NOT NULL
)
SELECT key, field, winner_value, winner_line, losing_lines, loser_stored, rule
FROM (SELECT * FROM competitions UNION ALL SELECT * FROM sources) entries
ORDER BY key, field, chunk_no, batch_line, rule <> 'source';  -- a batch's sources first
