-- A batch's reads and writes of the client's contacts, channels, custom fields and journey links.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- name: find_contacts
-- The batch's stored contacts, with their live channels and their values of the import's custom
-- fields ($3); updated_at and import_job_id are the undo journal's (queries/journal.sql). Not
-- locked: every write the batch makes is either an insert that a unique index guards (a
-- concurrent import's new key, channel or value makes it fail and retry, and the retry reads
-- it) or an update to the file's own values, so the result is that of some serial order per
-- key.
-- One index probe per key, whatever the statistics say: the LIMIT inside LATERAL rules out a
-- plan that scans the client's whole index and filters the keys. A key is matched by its stored
-- contact's normal form (importer_key_form: another writer's '529.982.247-25' is the file's
-- 52998224725) and answered as the batch's key; the stored spelling is left as it is.
SELECT c.id, c.cpf_cnpj, c.name, c.street_address, c.updated_at, c.import_job_id,
       d.channels, d.detail_values, f.field_ids, f.field_values
FROM unnest($2::text[]) AS k (cpf_cnpj)
CROSS JOIN LATERAL (
    SELECT id, k.cpf_cnpj, name, street_address, updated_at, import_job_id FROM contact
    WHERE client_id = $1 AND importer_key_form(cpf_cnpj) = k.cpf_cnpj
      AND cpf_cnpj IS NOT NULL AND deleted_at IS NULL
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

-- name: find_contacts_with_provenance
-- find_contacts for an import ($4) with a non-default merge policy: also whether the import
-- created the contact (own), the fields and channels it already marked (targets), and the
-- details its replace soft-deleted that are still deleted (revivable: they come back as they
-- were when a later batch of the import has their values).
SELECT c.id, c.cpf_cnpj, c.name, c.street_address, c.updated_at, c.import_job_id,
       c.import_job_id IS NOT DISTINCT FROM $4 AS own,
       d.channels, d.detail_values, f.field_ids, f.field_values, m.targets,
       r.channels AS revivable_channels, r.detail_values AS revivable_values
FROM unnest($2::text[]) AS k (cpf_cnpj)
CROSS JOIN LATERAL (
    SELECT id, k.cpf_cnpj, name, street_address, updated_at, import_job_id FROM contact
    WHERE client_id = $1 AND importer_key_form(cpf_cnpj) = k.cpf_cnpj
      AND cpf_cnpj IS NOT NULL AND deleted_at IS NULL
    LIMIT 1
) AS c
CROSS JOIN LATERAL (
    SELECT array_agg(channel_id) AS channels, array_agg(value) AS detail_values
    FROM contact_details WHERE contact_id = c.id AND deleted_at IS NULL
) AS d
CROSS JOIN LATERAL (
    SELECT array_agg(custom_field_id) AS field_ids, array_agg(value) AS field_values
    FROM contact_custom_fields WHERE contact_id = c.id AND custom_field_id = ANY($3::int[])
) AS f
CROSS JOIN LATERAL (
    SELECT array_agg(target) AS targets FROM import_merge_mark
    WHERE job_id = $4 AND contact_id = c.id
) AS m
CROSS JOIN LATERAL (
    SELECT array_agg(x.channel_id) AS channels, array_agg(x.value) AS detail_values
    FROM import_merge_mark mm
    JOIN contact_details x ON x.id = ANY(mm.replaced) AND x.deleted_at IS NOT NULL
    WHERE mm.job_id = $4 AND mm.contact_id = c.id AND mm.replaced <> '{}'
) AS r;

-- name: resolve_channel_keys
-- An import keyed by a channel ($3, core.keys): each key ($2) that is a live value of that
-- channel of the client's live contacts, with how many contacts have it (more than one: the
-- rows are ambiguous_key) and the one when there is one. One probe per key of
-- contact_details_client_channel_value_idx.
SELECT k.key, m.matches, m.contact_id
FROM unnest($2::text[]) AS k (key)
CROSS JOIN LATERAL (
    SELECT count(*) AS matches, min(x.contact_id) AS contact_id
    FROM contact_details x
    JOIN contact c ON c.id = x.contact_id AND c.client_id = $1 AND c.deleted_at IS NULL
    WHERE x.client_id = $1 AND x.channel_id = $3 AND x.value = k.key AND x.deleted_at IS NULL
) AS m
WHERE m.matches > 0;

-- name: find_contacts_by_id
-- find_contacts for the contacts a channel key resolved to (resolve_channel_keys): by id.
SELECT c.id, c.name, c.street_address, c.updated_at, c.import_job_id,
       d.channels, d.detail_values, f.field_ids, f.field_values
FROM contact c
CROSS JOIN LATERAL (
    SELECT array_agg(channel_id) AS channels, array_agg(value) AS detail_values
    FROM contact_details WHERE contact_id = c.id AND deleted_at IS NULL
) AS d
CROSS JOIN LATERAL (
    SELECT array_agg(custom_field_id) AS field_ids, array_agg(value) AS field_values
    FROM contact_custom_fields WHERE contact_id = c.id AND custom_field_id = ANY($3::int[])
) AS f
WHERE c.id = ANY($2::bigint[]) AND c.client_id = $1 AND c.deleted_at IS NULL;

-- name: find_contacts_by_id_with_provenance
-- find_contacts_with_provenance by id (an import keyed by a channel with a non-default policy).
SELECT c.id, c.name, c.street_address, c.updated_at, c.import_job_id,
       c.import_job_id IS NOT DISTINCT FROM $4 AS own,
       d.channels, d.detail_values, f.field_ids, f.field_values, m.targets,
       r.channels AS revivable_channels, r.detail_values AS revivable_values
FROM contact c
CROSS JOIN LATERAL (
    SELECT array_agg(channel_id) AS channels, array_agg(value) AS detail_values
    FROM contact_details WHERE contact_id = c.id AND deleted_at IS NULL
) AS d
CROSS JOIN LATERAL (
    SELECT array_agg(custom_field_id) AS field_ids, array_agg(value) AS field_values
    FROM contact_custom_fields WHERE contact_id = c.id AND custom_field_id = ANY($3::int[])
) AS f
CROSS JOIN LATERAL (
    SELECT array_agg(target) AS targets FROM import_merge_mark
    WHERE job_id = $4 AND contact_id = c.id
) AS m
CROSS JOIN LATERAL (
    SELECT array_agg(x.channel_id) AS channels, array_agg(x.value) AS detail_values
    FROM import_merge_mark mm
    JOIN contact_details x ON x.id = ANY(mm.replaced) AND x.deleted_at IS NOT NULL
    WHERE mm.job_id = $4 AND mm.contact_id = c.id AND mm.replaced <> '{}'
) AS r
WHERE c.id = ANY($2::bigint[]) AND c.client_id = $1 AND c.deleted_at IS NULL;

-- name: insert_merge_marks
-- What a batch of import $1 did under its merge policy: contact $2[i] had target $3[i] set.
-- A plain insert: a batch marks only what no earlier batch of the import marked.
INSERT INTO import_merge_mark (job_id, contact_id, target)
SELECT $1, m.contact_id, m.target FROM unnest($2::bigint[], $3::text[]) AS m (contact_id, target);

-- name: replace_details
-- A merge policy's replace: the stored live details ($2, $3, $4 pairwise: contact, channel,
-- value) the file's values of their channel lack, soft-deleted; their ids join the channel's
-- mark of import $1 (inserted just before in the same transaction), to be brought back by
-- revive_details.
WITH gone AS (
    UPDATE contact_details d SET deleted_at = now()
    FROM unnest($2::bigint[], $3::smallint[], $4::text[]) AS u (contact_id, channel_id, value)
    WHERE d.contact_id = u.contact_id AND d.channel_id = u.channel_id AND d.value = u.value
      AND d.deleted_at IS NULL
    RETURNING d.id, d.contact_id, d.channel_id
)
UPDATE import_merge_mark m SET replaced = m.replaced || g.ids
FROM (
    SELECT contact_id, channel_id, array_agg(id ORDER BY id) AS ids FROM gone GROUP BY 1, 2
) AS g
WHERE m.job_id = $1 AND m.contact_id = g.contact_id AND m.target = 'channel:' || g.channel_id;

-- name: revive_details
-- The details import $1's replace soft-deleted whose values a later batch has ($2, $3, $4
-- pairwise: contact, channel, value): live again, the same rows.
UPDATE contact_details d SET deleted_at = NULL
FROM import_merge_mark m,
     unnest($2::bigint[], $3::smallint[], $4::text[]) AS u (contact_id, channel_id, value)
WHERE m.job_id = $1 AND m.contact_id = u.contact_id AND m.target = 'channel:' || u.channel_id
  AND d.id = ANY(m.replaced) AND d.contact_id = u.contact_id AND d.channel_id = u.channel_id
  AND d.value = u.value AND d.deleted_at IS NOT NULL;

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

-- name: key_group_settings
-- In key_group_values' transaction: its aggregate over every value of the client's key channel
-- (880,001 at 1M rows) spilled to disk in 41 batches at the default work_mem (2.0 s; 1.4 s in
-- memory), and no JIT (50 ms to compile a statement run once per import).
SET LOCAL work_mem = '64MB';
SET LOCAL jit = off;

-- name: key_group_values
-- A channel key's groups (core.keys.key_groups): the live values of channel $2 of client $1's
-- live contacts that have more than one, with their contact; at most $3 (past it: whole).
WITH multi AS (
    SELECT contact_id FROM contact_details
    WHERE client_id = $1 AND channel_id = $2 AND deleted_at IS NULL
    GROUP BY contact_id
    HAVING count(*) > 1
)
SELECT x.contact_id, x.value
FROM multi m
JOIN contact c ON c.id = m.contact_id AND c.deleted_at IS NULL
JOIN contact_details x
  ON x.contact_id = m.contact_id AND x.channel_id = $2 AND x.deleted_at IS NULL
LIMIT $3;

-- name: save_key_groups
-- A run's key groups, kept with job $1 as long as its ledger ($2 whole, $3 values, $4 their
-- canonical values). One run of a job at a time (its lease): nothing to race with.
INSERT INTO import_key_groups (job_id, whole, key_values, canonicals)
VALUES ($1, $2, $3::text[], $4::text[])
ON CONFLICT (job_id) DO NOTHING;

-- name: load_key_groups
-- The key groups job $1's runs cut by (none: the run reads them, then keeps them).
SELECT whole, key_values, canonicals FROM import_key_groups WHERE job_id = $1;
