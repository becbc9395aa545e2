-- A batch's reads and writes of the client's contacts, channels, custom fields and journey links.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

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

-- name: join_journey
-- Seed 003 §9: the batch's contacts with a journey channel ($3 ids, $4 values, pairwise) join the
-- journey classification of import $1; a link made before (a requeued run) is kept as it is.
INSERT INTO journey_contact (journey_classification_contact_id, client_id, contact_id,
                             contact_detail_id)
SELECT c.id, $2, d.contact_id, d.id
FROM journey_classification_contact c
CROSS JOIN unnest($3::bigint[], $4::text[]) AS l (contact_id, value)
JOIN contact_details d ON d.contact_id = l.contact_id AND d.channel_id = 4
                      AND d.value = l.value AND d.deleted_at IS NULL
WHERE c.import_job_id = $1
ON CONFLICT (journey_classification_contact_id, contact_detail_id) DO NOTHING;

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
