-- Undo (issue 15): an ended import's changes taken back from its journal (queries/journal.sql),
-- one bounded slice per transaction, each slice consuming the journal rows it restores: what is
-- left of the journal is the undo's ledger, so a stopped undo resumes where it was. Named
-- queries, loaded once with every queries/*.sql.

-- name: lock_undo
-- The job, locked for the undo's decision ($2: the client, NULL: the owner's command line; $3:
-- the retention in days, past which its journal is purged).
SELECT id, client_id, status, journaled, finished_at, data_removed_at IS NOT NULL AS data_removed,
       run_generation,
       purged_at IS NOT NULL OR finished_at < now() - make_interval(days => $3) AS expired
FROM import_job
WHERE id = $1 AND ($2::integer IS NULL OR client_id = $2)
FOR UPDATE;

-- name: undo_conflicts
-- The contacts of import $1 that another writer changed since it ended ($2: its end), with the
-- other imports whose journals name them (an empty list: another writer), the first $3 by id.
WITH changed AS (
    SELECT j.contact_id FROM import_journal_contact j
    JOIN contact c ON c.id = j.contact_id
    WHERE j.job_id = $1 AND (c.updated_at <> j.after_updated_at OR c.deleted_at IS NOT NULL)
    UNION
    SELECT j.contact_id FROM import_journal_custom j
    LEFT JOIN contact_custom_fields v
           ON v.contact_id = j.contact_id AND v.custom_field_id = j.custom_field_id
    WHERE j.job_id = $1 AND v.value IS DISTINCT FROM j.after
    UNION
    SELECT j.contact_id FROM import_journal_detail j
    WHERE j.job_id = $1 AND NOT EXISTS (
        SELECT 1 FROM contact_details d
        WHERE d.contact_id = j.contact_id AND d.channel_id = j.channel_id AND d.value = j.value
          AND d.deleted_at IS NULL)
    UNION
    SELECT c.id FROM import_journal_created r
    CROSS JOIN LATERAL unnest(r.ids) AS u (id)
    JOIN contact c ON c.id = u.id
    WHERE r.job_id = $1 AND (c.updated_at > $2 OR c.deleted_at IS NOT NULL OR EXISTS (
        SELECT 1 FROM import_journal_custom o WHERE o.contact_id = c.id AND o.job_id <> $1
        UNION ALL
        SELECT 1 FROM import_journal_detail o WHERE o.contact_id = c.id AND o.job_id <> $1))
),
first AS (
    SELECT contact_id FROM changed ORDER BY contact_id LIMIT $3
)
SELECT f.contact_id,
       coalesce(array_agg(DISTINCT o.job_id) FILTER (WHERE o.job_id IS NOT NULL), '{}') AS imports
FROM first f
LEFT JOIN (
    SELECT contact_id, job_id FROM import_journal_contact WHERE job_id <> $1
    UNION ALL
    SELECT contact_id, job_id FROM import_journal_custom WHERE job_id <> $1
    UNION ALL
    SELECT contact_id, job_id FROM import_journal_detail WHERE job_id <> $1
) AS o ON o.contact_id = f.contact_id
GROUP BY f.contact_id
ORDER BY f.contact_id;

-- name: begin_undo
-- The job enters (or stays in) undoing. $2: the statuses an undo starts from.
UPDATE import_job SET status = 'undoing', updated_at = now()
WHERE id = $1 AND status = ANY($2::text[])
RETURNING id;

-- name: undo_created
-- One batch's created contacts soft-deleted with their live channels (the oldest batch left).
WITH slice AS (
    DELETE FROM import_journal_created
    WHERE (job_id, chunk_no, partition, part) = (
        SELECT job_id, chunk_no, partition, part FROM import_journal_created
        WHERE job_id = $1 ORDER BY chunk_no, partition, part LIMIT 1)
    RETURNING ids
),
removed AS (
    UPDATE contact c SET deleted_at = now(), updated_at = now()
    FROM slice s
    WHERE c.id = ANY(s.ids) AND c.import_job_id = $1 AND c.deleted_at IS NULL
    RETURNING c.id
),
details AS (
    UPDATE contact_details d SET deleted_at = now()
    FROM removed r
    WHERE d.contact_id = r.id AND d.deleted_at IS NULL
    RETURNING d.id
)
SELECT (SELECT count(*) FROM slice) AS slices, (SELECT count(*) FROM removed) AS contacts;

-- name: undo_contacts
-- Up to $2 journaled contacts back to their rows before the import (name, address, updated_at).
WITH slice AS (
    DELETE FROM import_journal_contact
    WHERE (job_id, contact_id) IN (
        SELECT job_id, contact_id FROM import_journal_contact
        WHERE job_id = $1 ORDER BY contact_id LIMIT $2)
    RETURNING contact_id, name, street_address, updated_at
),
restored AS (
    UPDATE contact c
    SET name = s.name, street_address = s.street_address, updated_at = s.updated_at
    FROM slice s
    WHERE c.id = s.contact_id
    RETURNING c.id
)
SELECT (SELECT count(*) FROM slice) AS slices, (SELECT count(*) FROM restored) AS contacts;

-- name: undo_customs
-- Up to $2 journaled custom values back: the value before, or no value (the row deleted).
WITH slice AS (
    DELETE FROM import_journal_custom
    WHERE (job_id, contact_id, custom_field_id) IN (
        SELECT job_id, contact_id, custom_field_id FROM import_journal_custom
        WHERE job_id = $1 ORDER BY contact_id, custom_field_id LIMIT $2)
    RETURNING contact_id, custom_field_id, before
),
restored AS (
    UPDATE contact_custom_fields v SET value = s.before
    FROM slice s
    WHERE s.before IS NOT NULL AND v.contact_id = s.contact_id
      AND v.custom_field_id = s.custom_field_id
    RETURNING v.id
),
removed AS (
    DELETE FROM contact_custom_fields v
    USING slice s
    WHERE s.before IS NULL AND v.contact_id = s.contact_id
      AND v.custom_field_id = s.custom_field_id
    RETURNING v.id
)
SELECT (SELECT count(*) FROM slice) AS slices,
       (SELECT count(*) FROM restored) + (SELECT count(*) FROM removed) AS contacts;

-- name: undo_details
-- Up to $2 channels the import added to stored contacts, deleted (they were not there).
WITH slice AS (
    DELETE FROM import_journal_detail
    WHERE (job_id, contact_id, channel_id, value) IN (
        SELECT job_id, contact_id, channel_id, value FROM import_journal_detail
        WHERE job_id = $1 ORDER BY contact_id, channel_id, value LIMIT $2)
    RETURNING contact_id, channel_id, value
),
removed AS (
    DELETE FROM contact_details d
    USING slice s
    WHERE d.contact_id = s.contact_id AND d.channel_id = s.channel_id AND d.value = s.value
      AND d.deleted_at IS NULL
    RETURNING d.id
)
SELECT (SELECT count(*) FROM slice) AS slices, (SELECT count(*) FROM removed) AS contacts;

-- name: undo_replaced
-- Up to $2 of the import's merge marks gone, the details its replace soft-deleted live again.
WITH slice AS (
    DELETE FROM import_merge_mark
    WHERE (job_id, contact_id, target) IN (
        SELECT job_id, contact_id, target FROM import_merge_mark
        WHERE job_id = $1 ORDER BY contact_id, target LIMIT $2)
    RETURNING replaced
),
revived AS (
    UPDATE contact_details d SET deleted_at = NULL
    FROM slice s
    WHERE d.id = ANY(s.replaced) AND d.deleted_at IS NOT NULL
    RETURNING d.id
)
SELECT (SELECT count(*) FROM slice) AS slices, (SELECT count(*) FROM revived) AS contacts;

-- name: undo_custom_fields
-- The custom fields the import created: their values on the contacts it created (soft-deleted
-- by now) deleted, then each field no value uses any more. Last, once per undo.
WITH fields AS (
    SELECT id FROM custom_field WHERE import_job_id = $1
),
values_gone AS (
    DELETE FROM contact_custom_fields v
    USING contact c
    WHERE v.custom_field_id IN (SELECT id FROM fields) AND c.id = v.contact_id
      AND c.import_job_id = $1
    RETURNING v.custom_field_id
)
SELECT count(*) AS values_removed FROM values_gone;

-- name: undo_unused_fields
DELETE FROM custom_field f
WHERE f.import_job_id = $1
  AND NOT EXISTS (SELECT 1 FROM contact_custom_fields v WHERE v.custom_field_id = f.id)
RETURNING f.id;

-- name: end_undo
-- The undo's end: undone, the finalization row says when, and the notification import_undone
-- (one per undo: its id carries the run).
WITH job AS (
    UPDATE import_job SET status = 'undone', undone_at = now(), updated_at = now()
    WHERE id = $1 AND status = 'undoing'
    RETURNING id, client_id, user_id, run_generation, rows_read, inserted, updated, invalid,
              error, ignored
),
finalized AS (
    UPDATE import_batch_finalized f SET undone_at = now()
    FROM job j WHERE f.batch_id = j.id
),
-- Its chunk ledger and lanes go: a requeue after the undo reads the whole file again (with
-- them it would find every chunk done), and its duplicate report (the requeue's run writes
-- it again). Its counters and error report stay, as history.
chunks AS (
    DELETE FROM import_chunk c USING job j WHERE c.job_id = j.id
),
lanes AS (
    DELETE FROM import_lane l USING job j WHERE l.job_id = j.id
),
duplicates AS (  -- the duplicate report goes too: a requeue writes it again
    DELETE FROM import_duplicate d USING job j WHERE d.job_id = j.id
),
notified AS (
    INSERT INTO outbox (message_id, topic, payload)
    SELECT 'notification:' || j.id || ':undone:' || j.run_generation, 'notification',
           jsonb_build_object('type', 'import_undone', 'job_id', j.id,
                              'client_id', j.client_id, 'user_id', j.user_id, 'status', 'undone',
                              'rows_read', j.rows_read, 'inserted', j.inserted,
                              'updated', j.updated, 'invalid', j.invalid, 'error', j.error,
                              'ignored', j.ignored)
    FROM job j
    ON CONFLICT (message_id) DO NOTHING
)
SELECT run_generation FROM job;
