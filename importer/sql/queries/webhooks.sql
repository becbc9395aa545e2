-- Completion webhooks (importer/services/webhooks.py). Named queries, loaded once with every
-- queries/*.sql by importer/sql/__init__.py. Every value is a bound parameter.

-- name: claim_webhooks
-- Up to $1 due deliveries, locked SKIP LOCKED (the workers of several instances share them):
-- each counts one more attempt, recorded as started, and is pushed $2 seconds away (a lease: an
-- attempt cut by a crash is due again after it). The client's secret comes along.
WITH due AS (
    SELECT id FROM webhook_delivery
    WHERE delivered_at IS NULL AND gave_up_at IS NULL AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE webhook_delivery d
    SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
    FROM due WHERE d.id = due.id
    RETURNING d.*
),
started AS (
    INSERT INTO webhook_attempt (delivery_id, attempt)
    SELECT delivery_id, attempts FROM claimed
)
SELECT c.delivery_id, c.job_id, c.client_id, c.event, c.url, c.body, c.attempts,
       extract(epoch FROM now() - c.created_at)::float8 AS age_s, w.secret
FROM claimed c LEFT JOIN client_webhook w ON w.client_id = c.client_id
ORDER BY c.next_attempt_at, c.id;

-- name: freeze_webhook_body
-- The body is the job document at the first attempt; every later attempt sends these bytes.
UPDATE webhook_delivery SET body = coalesce(body, $2) WHERE delivery_id = $1 RETURNING body;

-- name: record_webhook_attempt
-- The attempt's result ($3 status code, $4 error, $5 ms) and the delivery's next state ($6:
-- delivered, retry in $7 seconds, gave_up); only while the delivery is still at this attempt
-- ($2): a claim by another instance after our lease ran out wins.
WITH attempt AS (
    UPDATE webhook_attempt SET status_code = $3, error = $4, duration_ms = $5
    WHERE delivery_id = $1 AND attempt = $2
)
UPDATE webhook_delivery
SET delivered_at = CASE WHEN $6 = 'delivered' THEN now() END,
    gave_up_at = CASE WHEN $6 = 'gave_up' THEN now() END,
    next_attempt_at = CASE WHEN $6 = 'retry' THEN now() + make_interval(secs => $7)
                           ELSE next_attempt_at END,
    last_error = CASE WHEN $6 = 'delivered' THEN NULL
                      ELSE coalesce($4, 'status ' || $3::text) END
WHERE delivery_id = $1 AND attempts = $2;

-- name: enqueue_webhook
-- An event other than a finalization (the undo's import_undone, issue 15 point 1): one delivery
-- $2 of event $3 for job $1, to its notify_url or its client's default; none without a target.
-- Run it in the transaction that causes the event.
INSERT INTO webhook_delivery (delivery_id, job_id, client_id, event, url)
SELECT $2, j.id, j.client_id, $3, coalesce(j.notify_url, w.notify_url)
FROM import_job j LEFT JOIN client_webhook w ON w.client_id = j.client_id
WHERE j.id = $1 AND coalesce(j.notify_url, w.notify_url) IS NOT NULL
ON CONFLICT (delivery_id) DO NOTHING;

-- name: get_client_webhook
SELECT client_id, secret, notify_url FROM client_webhook WHERE client_id = $1;

-- name: set_client_webhook
-- The owner's setting: $2 a new secret (NULL: keep the current one, else $4, generated), $3 the
-- default notify_url (NULL: none).
INSERT INTO client_webhook (client_id, secret, notify_url)
VALUES ($1, coalesce($2, $4), $3)
ON CONFLICT (client_id) DO UPDATE
SET secret = coalesce($2, client_webhook.secret), notify_url = $3, updated_at = now()
RETURNING client_id, secret, notify_url;
