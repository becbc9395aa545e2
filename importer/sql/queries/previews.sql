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
