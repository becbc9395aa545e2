-- Named queries, loaded once by importer/sql/__init__.py. Every value is a bound parameter.

-- name: record_batch
-- The ledger row, last in the batch's transaction: a repeat finds the primary key taken, gets
-- no row back, and rolls the whole batch back.
INSERT INTO import_chunk (job_id, chunk_no, partition, status, first_line, end_offset,
                          rows_read, inserted, updated, invalid, error, ignored, attempts,
                          error_message)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (job_id, chunk_no, partition) DO NOTHING
RETURNING 1;

-- name: find_contacts
-- The batch's stored contacts, with their live channels and their values of the import's custom
-- fields ($3). Not locked: every write the batch makes is either an insert that a unique index
-- guards (a concurrent import's new key, channel or value makes it fail and retry, and the retry
-- reads it) or an update to the file's own values, so the result is that of some serial order
-- per key.
-- One index probe per key, whatever the statistics say: the LIMIT inside LATERAL rules out a
-- plan that scans the client's whole index and filters the keys.
SELECT c.id, c.cpf_cnpj, c.name, c.street_address,
       d.channels, d.detail_values, f.field_ids, f.field_values
FROM unnest($2::text[]) AS k (cpf_cnpj)
CROSS JOIN LATERAL (
    SELECT id, cpf_cnpj, name, street_address FROM contact
    WHERE client_id = $1 AND cpf_cnpj = k.cpf_cnpj AND deleted_at IS NULL
    LIMIT 1
) AS c
CROSS JOIN LATERAL (
    SELECT array_agg(channel_id) AS channels, array_agg(value) AS detail_values
    FROM contact_details WHERE contact_id = c.id AND deleted_at IS NULL
) AS d
CROSS JOIN LATERAL (
    SELECT array_agg(custom_field_id) AS field_ids, array_agg(value) AS field_values
    FROM contact_custom_fields WHERE contact_id = c.id AND custom_field_id = ANY($3::int[])
) AS f;

-- name: analyze_contacts
-- Run by the importer as its inserts outgrow the statistics (autovacuum may be off or late).
-- Only `contact` is planned against (key lookups, updates by id); the other tables are reached
-- through their unique indexes, whatever their statistics say.
ANALYZE contact;

-- name: next_contact_ids
-- A constant regclass: pg_get_serial_sequence() here would run its catalog lookup per row.
SELECT nextval('contact_id_seq'::regclass) FROM generate_series(1, $1);

-- name: update_contacts
-- Only the values the file brings: a concurrent import's change to another column survives.
UPDATE contact c
SET name = coalesce(u.name, c.name),
    street_address = coalesce(u.street_address, c.street_address),
    updated_at = now()
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u (id, name, street_address)
WHERE c.id = u.id;

-- name: update_custom_values
-- MERGE's changed custom values of stored contacts (the new ones are COPY'd).
UPDATE contact_custom_fields f
SET value = u.value
FROM unnest($1::bigint[], $2::int[], $3::text[]) AS u (contact_id, custom_field_id, value)
WHERE f.contact_id = u.contact_id AND f.custom_field_id = u.custom_field_id;

-- name: create_custom_fields
-- Creates the client's missing fields; returns the new ones only.
INSERT INTO custom_field (client_id, name, import_job_id)
SELECT DISTINCT ON (lower(n)) $1, n, $3 FROM unnest($2::text[]) AS n ORDER BY lower(n), n
ON CONFLICT (client_id, lower(name)) DO NOTHING
RETURNING id;

-- name: custom_field_ids
-- A separate statement from the insert: its fresh snapshot sees fields that a concurrent
-- import created (and committed) while our insert waited on them.
SELECT lower(name) AS key, id FROM custom_field
WHERE client_id = $1 AND lower(name) = ANY(SELECT lower(n) FROM unnest($2::text[]) AS n);

-- name: insert_job
INSERT INTO import_job (
    id, client_id, user_id, status, source, input_format, layout, conflict_strategy,
    chunk_size, partitions, has_internationalization, bytes_total, journey_id,
    auto_start_journey_mailing
)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: transition_job
-- The one guarded place where a job changes status.
UPDATE import_job
SET status = $2, updated_at = now(),
    started_at = CASE WHEN $2 = 'normalizing' THEN coalesce(started_at, now()) ELSE started_at END
WHERE id = $1 AND status = ANY($3::text[])
RETURNING status;

-- name: record_created_fields
UPDATE import_job SET created_custom_fields = created_custom_fields + $2 WHERE id = $1;

-- name: get_job
SELECT * FROM import_job WHERE id = $1;

-- name: done_batches
SELECT chunk_no, partition FROM import_chunk WHERE job_id = $1;

-- name: synchronous_commit
SET LOCAL synchronous_commit = on;

-- name: finalize_job
-- Exactly once: the guarded status update, the finalization row (its primary key) and the
-- outbox rows commit together; a second caller finds no row to update and writes nothing.
WITH totals AS (
    SELECT coalesce(sum(rows_read), 0) AS rows_read, coalesce(sum(inserted), 0) AS inserted,
           coalesce(sum(updated), 0) AS updated, coalesce(sum(invalid), 0) AS invalid,
           coalesce(sum(error), 0) AS error, coalesce(sum(ignored), 0) AS ignored
    FROM import_chunk WHERE job_id = $1
),
job AS (
    UPDATE import_job j
    SET status = CASE WHEN $2 = 'failed' THEN 'failed'
                      WHEN j.created_custom_fields > 0 THEN 'completed_with_placeholders'
                      ELSE 'completed' END,
        fail_reason = $3,
        rows_read = t.rows_read, inserted = t.inserted, updated = t.updated,
        invalid = t.invalid, error = t.error, ignored = t.ignored,
        finished_at = $4, updated_at = $4
    FROM totals t
    WHERE j.id = $1 AND j.status = ANY($5::text[])
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
    SELECT 'notification:' || j.id, 'notification',
           jsonb_build_object(
               'type', CASE WHEN j.status = 'failed' THEN 'import_failed'
                            WHEN j.invalid + j.error = 0 THEN 'import_done'
                            ELSE 'import_partial' END,
               'job_id', j.id, 'client_id', j.client_id, 'user_id', j.user_id,
               'status', j.status, 'fail_reason', j.fail_reason,
               'rows_read', j.rows_read, 'inserted', j.inserted, 'updated', j.updated,
               'invalid', j.invalid, 'error', j.error, 'ignored', j.ignored)
    FROM job j JOIN finalized f ON f.batch_id = j.id
),
journey AS (
    UPDATE journey_classification_contact c
    SET status = CASE WHEN c.auto_start_journey_mailing THEN 'ACTIVE' ELSE 'PAUSED' END,
        contact_amount = j.inserted + j.updated, updated_at = $4
    FROM job j JOIN finalized f ON f.batch_id = j.id
    WHERE c.import_job_id = j.id AND c.status = 'AWAITING_IMPORT' AND j.status <> 'failed'
),
firing AS (
    UPDATE firing_intent i SET released_at = $4
    FROM job j JOIN finalized f ON f.batch_id = j.id
    WHERE i.import_job_id = j.id AND i.released_at IS NULL AND j.status <> 'failed'
    RETURNING i.id, i.kind
),
released AS (
    INSERT INTO outbox (message_id, topic, payload)
    SELECT 'firing:' || id,
           CASE WHEN kind = 'sms' THEN 'sms/firing-intent' ELSE 'hsm/importing-intent' END,
           CASE WHEN kind = 'email' THEN jsonb_build_object('id', id, 'channelId', 3)
                ELSE jsonb_build_object('id', id) END
    FROM firing
)
SELECT j.status, j.rows_read, j.inserted, j.updated, j.invalid, j.error, j.ignored
FROM job j JOIN finalized f ON f.batch_id = j.id;

-- name: row_errors
SELECT line, column_name, reason, severity, value
FROM import_row_error WHERE job_id = $1
ORDER BY line, column_name NULLS FIRST, reason;
