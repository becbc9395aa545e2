-- A preview's staged rows (import_preview_row) and its document.
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

-- name: save_preview
UPDATE import_job SET preview = $2::jsonb, updated_at = now() WHERE id = $1;
