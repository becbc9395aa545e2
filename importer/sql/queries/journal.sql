-- The undo journal (issue 15): what a batch changes of the contacts that existed before its
-- import ($1), written in the batch's transaction just before the change, so it reads the
-- values as they were (a later batch of the same import keeps the first before-image and moves
-- the after-image on). A contact the import created (import_job_id = $1) is not journaled: the
-- undo soft-deletes it whole. Named queries, loaded once with every queries/*.sql.

-- name: journal_contacts
-- The rows of the stored contacts ($2) whose name or address the batch changes, before it.
INSERT INTO import_journal_contact (job_id, contact_id, name, street_address, updated_at,
                                    after_updated_at)
SELECT $1, c.id, c.name, c.street_address, c.updated_at, now()
FROM unnest($2::bigint[]) AS u (id)
JOIN contact c ON c.id = u.id
WHERE c.import_job_id IS DISTINCT FROM $1
ON CONFLICT (job_id, contact_id) DO UPDATE SET after_updated_at = EXCLUDED.after_updated_at;

-- name: journal_customs
-- The stored contacts' custom values the batch inserts or changes ($2, $3, $4 pairwise:
-- contact, field, the new value): the value before (NULL: none) and after.
INSERT INTO import_journal_custom (job_id, contact_id, custom_field_id, before, after)
SELECT $1, u.contact_id, u.custom_field_id, v.value, u.value
FROM unnest($2::bigint[], $3::int[], $4::text[]) AS u (contact_id, custom_field_id, value)
JOIN contact c ON c.id = u.contact_id AND c.import_job_id IS DISTINCT FROM $1
LEFT JOIN contact_custom_fields v
       ON v.contact_id = u.contact_id AND v.custom_field_id = u.custom_field_id
ON CONFLICT (job_id, contact_id, custom_field_id) DO UPDATE SET after = EXCLUDED.after;

-- name: journal_details
-- The channels the batch adds to stored contacts ($2, $3, $4 pairwise: contact, channel, value).
INSERT INTO import_journal_detail (job_id, contact_id, channel_id, value)
SELECT $1, u.contact_id, u.channel_id, u.value
FROM unnest($2::bigint[], $3::smallint[], $4::text[]) AS u (contact_id, channel_id, value)
JOIN contact c ON c.id = u.contact_id AND c.import_job_id IS DISTINCT FROM $1
ON CONFLICT DO NOTHING;

-- name: journal_created
-- The ids of the contacts batch ($2, $3, $4: chunk, partition, part) of import $1 created.
INSERT INTO import_journal_created (job_id, chunk_no, partition, part, ids)
VALUES ($1, $2, $3, $4, $5::bigint[])
ON CONFLICT DO NOTHING;
