-- The undo journal (issue 15): what a batch changes of the contacts that existed before its
-- import ($1), written in the batch's transaction just before the change, so it reads the
-- values as they were: one import_journal row per batch, one statement, no per-contact index.
-- A contact the import created (import_job_id = $1) is not journaled: the undo soft-deletes it
-- whole. Named queries, loaded once with every queries/*.sql.

-- name: journal_batch
-- Batch ($2, $3, $4: chunk, partition, part) of import $1: the ids of the contacts it creates
-- ($5); the rows before it of the stored contacts whose name or address it changes ($6, $7,
-- $8, $9 pairwise: id, name, address, updated_at); the custom values it sets on them ($10,
-- $11, $12, $13: contact, field, the value before or NULL, after); the channels it adds to them
-- ($14, $15, $16: contact, channel, value). All of it from the stored contacts the batch
-- planned against (adapters/postgres/journal.py): no look-up, no index but the row's key.
-- after_at: now(), the updated_at update_contacts gives them.
INSERT INTO import_journal (job_id, chunk_no, partition, part, after_at, created,
                            contact_ids, names, street_addresses, updated_ats,
                            custom_contacts, custom_fields, custom_befores, custom_afters,
                            detail_contacts, detail_channels, detail_values)
VALUES ($1, $2, $3, $4, now(), $5::bigint[],
        $6::bigint[], $7::text[], $8::text[], $9::timestamptz[],
        $10::bigint[], $11::int[], $12::text[], $13::text[],
        $14::bigint[], $15::smallint[], $16::text[])
ON CONFLICT DO NOTHING;
