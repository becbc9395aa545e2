-- The undo journal (issue 15): what a batch changes of the contacts that existed before its
-- import ($1), written in the batch's transaction just before the change, so it reads the
-- values as they were: one import_journal row per batch, one statement, no per-contact index.
-- A contact the import created (import_job_id = $1) is not journaled: the undo soft-deletes it
-- whole. Named queries, loaded once with every queries/*.sql.

-- name: journal_batch
-- Batch ($2, $3, $4: chunk, partition, part) of import $1: the ids of the contacts it creates
-- ($5); of the stored contacts it touches ($6, each once: read once, by primary key), the rows
-- before it of those ($7) whose name or address it changes; their custom values it inserts
-- ($8, $9, $10 pairwise: contact, field, value; none before) or changes ($11, $12, $13), the
-- value before (NULL: none) and after; the channels it adds to them ($14, $15, $16: contact,
-- channel, value). after_at: now(), the updated_at update_contacts gives them. No row when the
-- batch changes nothing of the kind. (Each array_agg of a subquery sees its rows in the same
-- order: the arrays pair up.)
WITH stored AS MATERIALIZED (
    SELECT c.id, c.name, c.street_address, c.updated_at
    FROM contact c
    WHERE c.id = ANY($6::bigint[]) AND c.import_job_id IS DISTINCT FROM $1
)
INSERT INTO import_journal (job_id, chunk_no, partition, part, after_at, created,
                            contact_ids, names, street_addresses, updated_ats,
                            custom_contacts, custom_fields, custom_befores, custom_afters,
                            detail_contacts, detail_channels, detail_values)
SELECT $1, $2, $3, $4, now(), $5::bigint[],
       coalesce(k.ids, '{}'), coalesce(k.names, '{}'), coalesce(k.addresses, '{}'),
       coalesce(k.updated_ats, '{}'),
       coalesce(v.contacts, '{}'), coalesce(v.fields, '{}'), coalesce(v.befores, '{}'),
       coalesce(v.afters, '{}'),
       coalesce(d.contacts, '{}'), coalesce(d.channels, '{}'), coalesce(d.vals, '{}')
FROM (
    SELECT array_agg(s.id) AS ids, array_agg(s.name) AS names,
           array_agg(s.street_address) AS addresses, array_agg(s.updated_at) AS updated_ats
    FROM unnest($7::bigint[]) AS u (id)
    JOIN stored s ON s.id = u.id
) AS k, (
    SELECT array_agg(u.contact_id) AS contacts, array_agg(u.custom_field_id) AS fields,
           array_agg(u.before) AS befores, array_agg(u.value) AS afters
    FROM (
        SELECT i.contact_id, i.custom_field_id, NULL::text AS before, i.value
        FROM unnest($8::bigint[], $9::int[], $10::text[])
            AS i (contact_id, custom_field_id, value)
        UNION ALL
        SELECT c.contact_id, c.custom_field_id, x.value, c.value
        FROM unnest($11::bigint[], $12::int[], $13::text[])
            AS c (contact_id, custom_field_id, value)
        LEFT JOIN contact_custom_fields x
               ON x.contact_id = c.contact_id AND x.custom_field_id = c.custom_field_id
    ) AS u
    JOIN stored s ON s.id = u.contact_id
) AS v, (
    SELECT array_agg(u.contact_id) AS contacts, array_agg(u.channel_id) AS channels,
           array_agg(u.value) AS vals
    FROM unnest($14::bigint[], $15::smallint[], $16::text[]) AS u (contact_id, channel_id, value)
    JOIN stored s ON s.id = u.contact_id
) AS d
WHERE cardinality($5::bigint[]) > 0 OR k.ids IS NOT NULL OR v.contacts IS NOT NULL
   OR d.contacts IS NOT NULL
ON CONFLICT DO NOTHING;
