-- The undo journal (issue 15): what a batch changes of the contacts that existed before its
-- import ($1), written in the batch's transaction just before the change, so it reads the
-- values as they were: one import_journal row per batch, one statement, no per-contact index.
-- A contact the import created (import_job_id = $1) is not journaled: the undo soft-deletes it
-- whole. Named queries, loaded once with every queries/*.sql.

-- name: journal_batch
-- Batch ($2, $3, $4: chunk, partition, part) of import $1: the ids of the contacts it creates
-- ($5); the rows before it of the stored contacts ($6) whose name or address it changes; their
-- custom values it inserts ($7, $8, $9 pairwise: contact, field, value; none before) or
-- changes ($10, $11, $12), the value before and after; the channels it adds to them ($13, $14,
-- $15: contact, channel, value). after_at: now(), the updated_at update_contacts gives them. No
-- row when the batch changes nothing of the kind. (Each array_agg of a subquery sees its rows
-- in the same order: the arrays pair up.) Every look-up is by primary key, one per value: the
-- contact's (not one of this import's) behind OFFSET 0, so that no plan — a generic one with
-- its guesses of the arrays' sizes among them — joins the values to the contacts otherwise.
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
    SELECT array_agg(c.id) AS ids, array_agg(c.name) AS names,
           array_agg(c.street_address) AS addresses, array_agg(c.updated_at) AS updated_ats
    FROM contact c
    WHERE c.id = ANY($6::bigint[]) AND c.import_job_id IS DISTINCT FROM $1
) AS k, (
    SELECT array_agg(u.contact_id) AS contacts, array_agg(u.custom_field_id) AS fields,
           array_agg(u.before) AS befores, array_agg(u.value) AS afters
    FROM (
        SELECT i.contact_id, i.custom_field_id, NULL::text AS before, i.value
        FROM unnest($7::bigint[], $8::int[], $9::text[])
            AS i (contact_id, custom_field_id, value)
        UNION ALL
        SELECT c.contact_id, c.custom_field_id,
               (SELECT x.value FROM contact_custom_fields x
                WHERE x.contact_id = c.contact_id AND x.custom_field_id = c.custom_field_id),
               c.value
        FROM unnest($10::bigint[], $11::int[], $12::text[])
            AS c (contact_id, custom_field_id, value)
    ) AS u
    CROSS JOIN LATERAL (
        SELECT FROM contact c
        WHERE c.id = u.contact_id AND c.import_job_id IS DISTINCT FROM $1 OFFSET 0
    ) AS stored
) AS v, (
    SELECT array_agg(u.contact_id) AS contacts, array_agg(u.channel_id) AS channels,
           array_agg(u.value) AS vals
    FROM unnest($13::bigint[], $14::smallint[], $15::text[]) AS u (contact_id, channel_id, value)
    CROSS JOIN LATERAL (
        SELECT FROM contact c
        WHERE c.id = u.contact_id AND c.import_job_id IS DISTINCT FROM $1 OFFSET 0
    ) AS stored
) AS d
WHERE cardinality($5::bigint[]) > 0 OR k.ids IS NOT NULL OR v.contacts IS NOT NULL
   OR d.contacts IS NOT NULL
ON CONFLICT DO NOTHING;
