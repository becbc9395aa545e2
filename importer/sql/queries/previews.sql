-- A preview's staged rows (import_preview_row), its rest in `ready`, and the writes of a run
-- outside its batches (a validation's error report and counts).
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py.

-- name: preview_rows
-- The staged rows of preview $1 by key, then line: each key's rows together, in file order
-- (byte order of the keys: the order the pure preview builder checks).
SELECT cpf_cnpj, line, name, street_address, extra
FROM import_preview_row
WHERE job_id = $1
ORDER BY cpf_cnpj COLLATE "C", line;

-- name: preview_rows_by_channel
-- preview_rows of a preview keyed by channel $3 of client $2 (core.keys): each key resolved as
-- resolve_channel_keys does; the keys of one stored contact come together under the smallest
-- (canonical), then by line. matches > 1: the rows are ambiguous_key.
WITH staged_keys AS (
    SELECT DISTINCT cpf_cnpj AS key FROM import_preview_row WHERE job_id = $1
), resolved AS (
    SELECT k.key, m.matches, m.contact_id
    FROM staged_keys k
    CROSS JOIN LATERAL (
        SELECT count(*) AS matches, min(x.contact_id) AS contact_id
        FROM contact_details x
        JOIN contact c ON c.id = x.contact_id AND c.client_id = $2 AND c.deleted_at IS NULL
        WHERE x.client_id = $2 AND x.channel_id = $3 AND x.value = k.key AND x.deleted_at IS NULL
    ) AS m
), canonical AS (
    SELECT key, matches, contact_id,
           CASE WHEN matches = 1
                THEN min(key COLLATE "C") OVER (PARTITION BY contact_id, matches = 1)
                ELSE key END AS canonical
    FROM resolved
)
SELECT k.canonical, r.line, r.name, r.street_address, r.extra, k.matches, k.contact_id
FROM import_preview_row r
JOIN canonical k ON k.key = r.cpf_cnpj
WHERE r.job_id = $1
ORDER BY k.canonical COLLATE "C", r.line;

-- name: clear_preview_rows
DELETE FROM import_preview_row WHERE job_id = $1;

-- name: rest_ready
-- A preview's end: the job rests in `ready` with its document ($2), waiting for an apply
-- (awaiting_apply: no claim takes it) until $3 seconds from now; $4: the statuses it may come
-- from, $5: the run's lease owner (NULL: unfenced).
UPDATE import_job
SET status = 'ready', preview = $2::jsonb, awaiting_apply = true,
    preview_expires_at = now() + make_interval(secs => $3), updated_at = now()
WHERE id = $1 AND status = ANY($4::text[]) AND ($5::text IS NULL OR lease_owner = $5)
RETURNING status;

-- name: clear_row_errors
-- A run that starts with an empty ledger starts with an empty error report: rows a preview or a
-- validation reported outside any batch are reported again by the batches that follow.
DELETE FROM import_row_error WHERE job_id = $1;

-- name: save_validation
-- What the validation of the whole file found ($2), under the run's lease ($3, NULL: unfenced).
UPDATE import_job SET validation = $2::jsonb, updated_at = now()
WHERE id = $1 AND ($3::text IS NULL OR lease_owner = $3)
RETURNING id;
