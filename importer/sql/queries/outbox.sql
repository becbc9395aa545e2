-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- outbox relay
-- The relay's batch, locked until its transaction ends: rows of the known topics ($1) in id
-- order, skipping those another relay holds. Rows of other topics stay unpublished (the relay
-- reports them with unknown_outbox_topics); filtering them here keeps them from filling every
-- batch and stalling the known ones behind them.

-- name: lock_outbox
SELECT id, message_id, topic, payload::text AS payload
FROM outbox
WHERE published_at IS NULL AND topic = ANY($1::text[])
ORDER BY id
LIMIT $2
FOR UPDATE SKIP LOCKED;

-- name: mark_outbox_published
UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[]);

-- name: unknown_outbox_topics
SELECT topic, count(*) AS messages
FROM outbox
WHERE published_at IS NULL AND NOT (topic = ANY($1::text[]))
GROUP BY topic
ORDER BY topic;
