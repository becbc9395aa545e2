-- Undo (issue 15): an ended import's changes taken back from its journal (queries/journal.sql),
-- one bounded slice per transaction (a batch's journal row, newest first; then the merge
-- marks), each slice consuming the journal rows it restores: what is left of the journal is the
-- undo's ledger, so a stopped undo resumes where it was. Named queries, loaded once with every
-- queries/*.sql.

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
-- A contact's after-image is its last batch's (ord: the batches' apply order, see undo_batch). The
-- other imports' journals are the client's rows written since this import's first batch (only
-- those can have changed what it wrote: imports of a client run one at a time), unnested: a
-- hash join on this rare path, no per-contact index on every import's.
WITH batches AS MATERIALIZED (
    SELECT j.*, (j.chunk_no, j.partition, import_part_order(j.part)) AS ord
    FROM import_journal j WHERE j.job_id = $1
),
contacts AS (
    SELECT DISTINCT ON (u.id) u.id, b.after_at
    FROM batches b CROSS JOIN LATERAL unnest(b.contact_ids) AS u (id)
    ORDER BY u.id, b.ord DESC
),
customs AS (
    SELECT DISTINCT ON (u.contact_id, u.custom_field_id) u.contact_id, u.custom_field_id, u.after
    FROM batches b
    CROSS JOIN LATERAL unnest(b.custom_contacts, b.custom_fields, b.custom_afters)
        AS u (contact_id, custom_field_id, after)
    ORDER BY u.contact_id, u.custom_field_id, b.ord DESC
),
others AS MATERIALIZED (  -- (import, contact, what) of the client's other imports' journals
    SELECT o.job_id, u.contact_id, u.what
    FROM import_job me
    JOIN import_job oj ON oj.client_id = me.client_id AND oj.id <> me.id
    JOIN import_journal o
      ON o.job_id = oj.id AND o.after_at >= (SELECT min(b.after_at) FROM batches b)
    CROSS JOIN LATERAL (
        SELECT x, 'contact' FROM unnest(o.contact_ids) AS x
        UNION ALL SELECT x, 'custom' FROM unnest(o.custom_contacts) AS x
        UNION ALL SELECT x, 'detail' FROM unnest(o.detail_contacts) AS x
    ) AS u (contact_id, what)
    WHERE me.id = $1
    UNION ALL  -- the journey links other imports made since (seed 003 §9)
    SELECT k.import_job_id, l.contact_id, 'journey'
    FROM import_job me
    JOIN journey_classification_contact k ON k.client_id = me.client_id AND k.import_job_id <> me.id
    JOIN journey_contact l ON l.journey_classification_contact_id = k.id
    WHERE me.id = $1 AND l.created_at >= (SELECT min(b.after_at) FROM batches b)
),
changed AS (
    SELECT k.id AS contact_id FROM contacts k
    JOIN contact c ON c.id = k.id
    WHERE c.updated_at <> k.after_at OR c.deleted_at IS NOT NULL
    UNION
    SELECT k.contact_id FROM customs k
    LEFT JOIN contact_custom_fields v
           ON v.contact_id = k.contact_id AND v.custom_field_id = k.custom_field_id
    WHERE v.value IS DISTINCT FROM k.after
    UNION
    SELECT u.contact_id
    FROM batches b
    CROSS JOIN LATERAL unnest(b.detail_contacts, b.detail_channels, b.detail_values)
        AS u (contact_id, channel_id, value)
    WHERE NOT EXISTS (
        SELECT 1 FROM contact_details d
        WHERE d.contact_id = u.contact_id AND d.channel_id = u.channel_id AND d.value = u.value
          AND d.deleted_at IS NULL)
    UNION  -- a channel it added that another import's journey links: it cannot go
    SELECT u.contact_id
    FROM batches b
    CROSS JOIN LATERAL unnest(b.detail_contacts, b.detail_channels, b.detail_values)
        AS u (contact_id, channel_id, value)
    JOIN contact_details d
      ON d.contact_id = u.contact_id AND d.channel_id = u.channel_id AND d.value = u.value
     AND d.deleted_at IS NULL
    JOIN journey_contact l ON l.contact_detail_id = d.id
    JOIN journey_classification_contact k
      ON k.id = l.journey_classification_contact_id AND k.import_job_id <> $1
    UNION
    SELECT c.id FROM batches b
    CROSS JOIN LATERAL unnest(b.created) AS u (id)
    JOIN contact c ON c.id = u.id
    WHERE c.updated_at > $2 OR c.deleted_at IS NOT NULL OR c.id IN (
        SELECT contact_id FROM others WHERE what <> 'contact')
),
first AS (
    SELECT contact_id FROM changed ORDER BY contact_id LIMIT $3
)
SELECT f.contact_id,
       coalesce(array_agg(DISTINCT o.job_id) FILTER (WHERE o.job_id IS NOT NULL), '{}') AS imports
FROM first f
LEFT JOIN others o ON o.contact_id = f.contact_id
GROUP BY f.contact_id
ORDER BY f.contact_id;

-- name: begin_undo
-- The job enters (or stays in) undoing under the lease of $3 for $4 seconds (renew_undo renews
-- it with each slice; fail_stale_undos fails an undo whose lease expired). $2: the statuses an
-- undo starts from. A failed undo's reason goes: the retry is under way.
UPDATE import_job
SET status = 'undoing', updated_at = now(), lease_owner = $3,
    lease_expires_at = now() + make_interval(secs => $4),
    fail_reason = CASE WHEN fail_reason LIKE 'undo\_failed%' THEN NULL ELSE fail_reason END
WHERE id = $1 AND status = ANY($2::text[])
RETURNING id;

-- name: lock_undo_journey
-- The journey classification of import $1 (seed 003 §9), locked for the undo's decision: the
-- journey component cannot start it meanwhile.
SELECT id, status FROM journey_classification_contact WHERE import_job_id = $1 FOR UPDATE;

-- name: cancel_undo_journey
-- The undo takes the import's contacts out of its journey: the classification ends CANCELED.
UPDATE journey_classification_contact SET status = 'CANCELED', updated_at = now()
WHERE import_job_id = $1 AND status <> 'CANCELED';

-- name: renew_undo
-- A slice renews the undo's lease ($2, its owner; $3 seconds); no row: the lease was lost (a
-- sweep failed the undo, or another undo took it over).
UPDATE import_job SET lease_expires_at = now() + make_interval(secs => $3)
WHERE id = $1 AND status = 'undoing' AND lease_owner = $2
RETURNING id;

-- name: fail_undo
-- A step of the undo failed: the job is failed with the reason ($2), its lease released; the
-- rest of its journal stays, and undoing it again resumes there.
UPDATE import_job
SET status = 'failed', fail_reason = $2, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = now()
WHERE id = $1 AND status = 'undoing'
RETURNING id;

-- name: fail_stale_undos
-- The undos whose process stopped (their lease expired, or an undo from before the lease):
-- failed with the reason $1, the owner undoes them again; at most $2.
UPDATE import_job
SET status = 'failed', fail_reason = $1, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = now()
WHERE id IN (
    SELECT id FROM import_job
    WHERE status = 'undoing' AND coalesce(lease_expires_at, '-infinity') <= now()
    LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: undo_journey_links
-- Up to $2 of the journey links import $1 made (its classification's), gone first: the
-- channels they point to go with the batches' slices.
WITH slice AS (
    DELETE FROM journey_contact
    WHERE id IN (
        SELECT l.id FROM journey_contact l
        JOIN journey_classification_contact c ON c.id = l.journey_classification_contact_id
        WHERE c.import_job_id = $1
        ORDER BY l.id LIMIT $2)
    RETURNING id
)
SELECT count(*) AS slices FROM slice;

-- name: undo_batch
-- The newest batch row left of import $1's journal (the batches' apply order: chunk, partition,
-- then the pieces of a split batch in the order they applied: import_part_order), consumed and
-- restored: its created contacts soft-deleted with their live channels; its stored contacts
-- back to their rows before it (name, address, updated_at); its custom values back to the
-- value before, or deleted (none); the channels it added deleted. Newest first, each contact
-- ends at its first before-image.
-- The statement's parts touch distinct rows (created contacts are never journaled as stored).
WITH slice AS (
    DELETE FROM import_journal
    WHERE (job_id, chunk_no, partition, part) = (
        SELECT job_id, chunk_no, partition, part FROM import_journal
        WHERE job_id = $1
        ORDER BY chunk_no DESC, partition DESC, import_part_order(part) DESC
        LIMIT 1)
    RETURNING *
),
removed AS (
    UPDATE contact c SET deleted_at = now(), updated_at = now()
    FROM slice s
    WHERE c.id = ANY(s.created) AND c.import_job_id = $1 AND c.deleted_at IS NULL
    RETURNING c.id
),
removed_details AS (
    UPDATE contact_details d SET deleted_at = now()
    FROM removed r
    WHERE d.contact_id = r.id AND d.deleted_at IS NULL
    RETURNING d.id
),
restored AS (
    UPDATE contact c
    SET name = u.name, street_address = u.street_address, updated_at = u.updated_at
    FROM slice s
    CROSS JOIN LATERAL unnest(s.contact_ids, s.names, s.street_addresses, s.updated_ats)
        AS u (id, name, street_address, updated_at)
    WHERE c.id = u.id
    RETURNING c.id
),
customs AS (
    SELECT u.contact_id, u.custom_field_id, u.before
    FROM slice s
    CROSS JOIN LATERAL unnest(s.custom_contacts, s.custom_fields, s.custom_befores)
        AS u (contact_id, custom_field_id, before)
),
customs_restored AS (
    UPDATE contact_custom_fields v SET value = k.before
    FROM customs k
    WHERE k.before IS NOT NULL AND v.contact_id = k.contact_id
      AND v.custom_field_id = k.custom_field_id
    RETURNING v.id
),
customs_removed AS (
    DELETE FROM contact_custom_fields v
    USING customs k
    WHERE k.before IS NULL AND v.contact_id = k.contact_id
      AND v.custom_field_id = k.custom_field_id
    RETURNING v.id
),
details_removed AS (
    DELETE FROM contact_details d
    USING slice s
    CROSS JOIN LATERAL unnest(s.detail_contacts, s.detail_channels, s.detail_values)
        AS u (contact_id, channel_id, value)
    WHERE d.contact_id = u.contact_id AND d.channel_id = u.channel_id AND d.value = u.value
      AND d.deleted_at IS NULL
    RETURNING d.id
)
SELECT (SELECT count(*) FROM slice) AS slices,
       (SELECT count(*) FROM removed) + (SELECT count(*) FROM restored) AS contacts,
       (SELECT count(*) FROM customs_restored) + (SELECT count(*) FROM customs_removed)
       + (SELECT count(*) FROM details_removed) + (SELECT count(*) FROM removed_details)
       AS values_undone;

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
    UPDATE import_job
    SET status = 'undone', undone_at = now(), updated_at = now(), lease_owner = NULL,
        lease_expires_at = NULL
    WHERE id = $1 AND status = 'undoing'
    RETURNING id, client_id, user_id, run_generation, rows_read, inserted, updated, invalid,
              error, ignored
),
journey AS (  -- its links are gone (undo_journey_links): the classification has no contact
    UPDATE journey_classification_contact c
    SET contact_amount = (SELECT count(DISTINCT l.contact_id) FROM journey_contact l
                          WHERE l.journey_classification_contact_id = c.id),
        updated_at = now()
    FROM job j WHERE c.import_job_id = j.id
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
key_groups AS (  -- kept as long as the ledger: a requeue's run reads them again
    DELETE FROM import_key_groups g USING job j WHERE g.job_id = j.id
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
