-- A preview's staged rows (import_preview_row), its rest in `ready`, and the writes of a run
-- outside its batches (a validation's error report and counts).
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py.

-- name: preview_rows
-- The staged rows of preview $1 by key, then line: each key's rows together, in file order
-- (byte order of the keys: the order the pure preview builder checks).
SELECT cpf_cnpj, line, name, street_address, details, custom_fields
FROM import_preview_row
WHERE job_id = $1
ORDER BY cpf_cnpj COLLATE "C", line;

-- name: preview_rows_of_keys
-- preview_rows of the keys $2 only (the sample's).
SELECT cpf_cnpj, line, name, street_address, details, custom_fields
FROM import_preview_row
WHERE job_id = $1 AND cpf_cnpj = ANY($2::text[])
ORDER BY cpf_cnpj COLLATE "C", line;

-- name: analyze_preview_rows
-- The staging table's statistics, before a preview's tally is planned.
ANALYZE import_preview_row;

-- name: preview_tally_settings
-- In preview_tally's transaction: no JIT. The planner takes each row's jsonb_each_text for 100
-- rows (the built-in estimate; 3 in the benchmark's file), so the statement looks costly enough
-- to compile, and compiling it took longer than the rest of a partition's tally (3 of 8 CPU-s).
SET LOCAL jit = off;

-- name: preview_tally
-- The preview of job $1 for client $2 computed set-based, for the default merge policy and the
-- CPF/CNPJ key ($3: MERGE, else DISCARD): what core.preview.PreviewBuilder.add sums key by key,
-- summed here over the staged keys of one key partition ($9: the part its batches staged; the
-- partitions run at once on as many connections) against their stored contacts. $4/$5: the
-- client's custom fields the file names (id, lower-case name, as custom_field_ids gives them);
-- $6: how many sample keys; $7/$8: the channels' ids and field names.
-- A key's fold (core.merge.fold_rows): MERGE takes the last non-empty name, address and custom
-- value by line and the union of channels; DISCARD the key's first row, and a stored contact's
-- values stay as they are (no file value counts). A value's line before it, zero-padded to 10
-- digits, makes the greatest of a key's values its last one: an order-free max (no sort per
-- key); substr(…, 11) gives the value back. A field's tally
-- (core.preview.FieldTally), of the keys with a value of it before or after: `first` no stored
-- value and a file value, `changed` a stored value and another file value (a channel: a value
-- the stored ones lack), `kept` a stored value and no other. One row: the key counts, the
-- row count, the tallies (fields as the builder names them), and the first keys (byte order)
-- with a field given a first or another value: the sample's, whose rows the builder then plans.
WITH folded AS MATERIALIZED (
    SELECT cpf_cnpj COLLATE "C" AS key, count(*) AS rows, min(line) AS first_line,
           max(lpad(line::text, 10, '0') || name COLLATE "C")
               FILTER (WHERE $3 AND name IS NOT NULL) AS last_name,
           max(lpad(line::text, 10, '0') || street_address COLLATE "C")
               FILTER (WHERE $3 AND street_address IS NOT NULL) AS last_address,
           min(lpad(line::text, 10, '0') || coalesce('=' || name, '') COLLATE "C")
               FILTER (WHERE NOT $3) AS first_name,
           min(lpad(line::text, 10, '0') || coalesce('=' || street_address, '') COLLATE "C")
               FILTER (WHERE NOT $3) AS first_address,
           min((lpad(line::text, 10, '0') || lpad(coalesce(channels, 0)::text, 2, '0')
                || (custom_values IS NOT NULL)::int::text) COLLATE "C") AS first_shape
    FROM import_preview_row
    WHERE job_id = $1 AND part = $9
    GROUP BY 1
), keyed AS MATERIALIZED (
    SELECT f.key, f.rows, f.first_line, c.id AS contact_id,
           c.id IS NULL AND (f.rows = 1 OR NOT $3) AS simple,
           substr(f.first_shape, 11, 2)::int AS first_channels,
           substr(f.first_shape, 13) = '1' AS first_customs,
           c.name AS stored_name, c.street_address AS stored_address,
           CASE WHEN $3 THEN substr(f.last_name, 11)
                WHEN c.id IS NULL THEN nullif(substr(f.first_name, 12), '') END AS name,
           CASE WHEN $3 THEN substr(f.last_address, 11)
                WHEN c.id IS NULL THEN nullif(substr(f.first_address, 12), '')
           END AS street_address
    FROM folded f
    LEFT JOIN contact c ON c.client_id = $2 AND importer_key_form(c.cpf_cnpj) = f.key
        AND c.cpf_cnpj IS NOT NULL AND c.deleted_at IS NULL
), effective AS NOT MATERIALIZED (  -- the rows whose values count: all, or DISCARD's
    SELECT k.key, k.simple, r.line, r.details, r.custom_values
    FROM keyed k
    JOIN import_preview_row r ON r.cpf_cnpj = k.key
    WHERE r.job_id = $1 AND r.part = $9 AND ($3 OR (r.line = k.first_line AND k.contact_id IS NULL))
), customs AS MATERIALIZED (  -- per key and custom field: the file's last value, the stored one;
    -- a simple key's (new, its one row) only counted, by field, under a NULL key
    SELECT key, field, substr(max(value COLLATE "C") FILTER (WHERE NOT stored), 11) AS value,
           max(value) FILTER (WHERE stored) AS stored_value, count(*) AS found
    FROM (
        SELECT CASE WHEN NOT e.simple THEN e.key END AS key, v.key AS field,
               lpad(e.line::text, 10, '0') || v.value AS value, false AS stored
        FROM effective e
        CROSS JOIN LATERAL jsonb_each_text(e.custom_values::jsonb) AS v
        UNION ALL
        SELECT k.key, n.field, v.value, true AS stored
        FROM keyed k
        JOIN contact_custom_fields v ON v.contact_id = k.contact_id
        JOIN unnest($4::int[], $5::text[]) AS n (id, field) ON n.id = v.custom_field_id
    ) AS found
    GROUP BY key, field
), channels AS MATERIALIZED (  -- per key and channel: any value stored, any the file adds
    SELECT key, channel, bool_or(stored) AS had,
           bool_or(NOT stored)
               AND NOT coalesce(array_agg(value) FILTER (WHERE NOT stored)
                                <@ array_agg(value) FILTER (WHERE stored), false) AS adds
    FROM (
        SELECT e.key, (d ->> 0)::int AS channel, (d ->> 1) COLLATE "C" AS value, false AS stored
        FROM effective e
        CROSS JOIN LATERAL jsonb_array_elements(e.details::jsonb) AS d
        WHERE NOT e.simple
        UNION ALL
        SELECT k.key, x.channel_id, x.value, true AS stored
        FROM keyed k
        JOIN contact_details x ON x.contact_id = k.contact_id AND x.deleted_at IS NULL
    ) AS found
    GROUP BY key, channel
), tallies AS (
    SELECT 'name' AS field,
           count(*) FILTER (WHERE stored_name IS NULL AND name IS NOT NULL) AS first,
           count(*) FILTER (WHERE stored_name <> name) AS changed,
           count(*) FILTER (WHERE stored_name IS NOT NULL
                                  AND (name IS NULL OR name = stored_name)) AS kept
    FROM keyed
    UNION ALL
    SELECT 'street_address',
           count(*) FILTER (WHERE stored_address IS NULL AND street_address IS NOT NULL),
           count(*) FILTER (WHERE stored_address <> street_address),
           count(*) FILTER (WHERE stored_address IS NOT NULL
                                  AND (street_address IS NULL OR street_address = stored_address))
    FROM keyed
    UNION ALL
    SELECT 'custom:' || field,
           count(*) FILTER (WHERE key IS NOT NULL AND stored_value IS NULL)
               + coalesce(sum(found) FILTER (WHERE key IS NULL), 0),
           count(*) FILTER (WHERE stored_value <> value),
           count(*) FILTER (WHERE stored_value IS NOT NULL
                                  AND (value IS NULL OR value = stored_value))
    FROM customs
    GROUP BY field
    UNION ALL
    SELECT n.field,
           count(*) FILTER (WHERE NOT had),
           count(*) FILTER (WHERE had AND adds),
           count(*) FILTER (WHERE had AND NOT adds)
    FROM channels
    JOIN unnest($7::int[], $8::text[]) AS n (id, field) ON n.id = channels.channel
    GROUP BY n.field
    UNION ALL
    SELECT n.field, count(*) FILTER (WHERE k.first_channels & (1 << n.id) <> 0), 0, 0
    FROM keyed k
    CROSS JOIN unnest($7::int[], $8::text[]) AS n (id, field)
    WHERE k.simple
    GROUP BY n.field
), changes AS (  -- the first keys of each kind of change (a key has a row per field, channel)
    (SELECT key FROM keyed
     WHERE (name IS NOT NULL AND name IS DISTINCT FROM stored_name)
        OR (street_address IS NOT NULL AND street_address IS DISTINCT FROM stored_address)
        OR (simple AND (first_channels <> 0 OR first_customs))
     ORDER BY key LIMIT $6)
    UNION
    (SELECT key FROM customs
     WHERE key IS NOT NULL AND value IS NOT NULL AND value IS DISTINCT FROM stored_value
     ORDER BY key LIMIT $6 * (SELECT count(*) FROM tallies WHERE field LIKE 'custom:%'))
    UNION
    (SELECT key FROM channels WHERE adds ORDER BY key LIMIT $6 * cardinality($7::int[]))
)
SELECT (SELECT count(*) FROM keyed) AS keys,
       (SELECT count(*) FROM keyed WHERE contact_id IS NULL) AS new_keys,
       (SELECT sum(rows) FROM keyed)::bigint AS rows,
       t.fields, t.firsts, t.changes, t.kept,
       ARRAY(SELECT key FROM changes ORDER BY key LIMIT $6) AS sample_keys
FROM (
    SELECT array_agg(field ORDER BY field) AS fields,
           array_agg(first ORDER BY field) AS firsts,
           array_agg(changed ORDER BY field) AS changes,
           array_agg(kept ORDER BY field) AS kept
    FROM (
        SELECT field, sum(first)::bigint AS first, sum(changed)::bigint AS changed,
               sum(kept)::bigint AS kept
        FROM tallies
        GROUP BY field
    ) AS summed
    WHERE first + changed + kept > 0
) AS t;

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
SELECT k.canonical, r.line, r.name, r.street_address, r.details, r.custom_fields, k.matches,
       k.contact_id
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
-- validation reported outside any batch are reported again by the batches that follow (and
-- counted again against the report's cap).
WITH tally AS (
    DELETE FROM import_error_tally WHERE job_id = $1
)
DELETE FROM import_row_error WHERE job_id = $1;

-- name: save_validation
-- What the validation of the whole file found ($2), under the run's lease ($3, NULL: unfenced).
UPDATE import_job SET validation = $2::jsonb, updated_at = now()
WHERE id = $1 AND ($3::text IS NULL OR lease_owner = $3)
RETURNING id;
