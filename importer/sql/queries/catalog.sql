-- The API's catalog: layouts, journeys and firing intents (for a new job); the readiness ping.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- layouts (API)
-- Every statement is scoped by client_id ($1): another tenant's layout is simply not found.
-- Only layouts with a document (made through the API) are served.

-- name: insert_layout
INSERT INTO import_layout (client_id, name, delimiter, encoding, has_header, document)
VALUES ($1, $2, $3, $4, $5, $6::jsonb)
RETURNING id, name, document::text AS document, created_at, updated_at;

-- name: get_layout
SELECT id, name, document::text AS document, created_at, updated_at
FROM import_layout WHERE client_id = $1 AND id = $2 AND document IS NOT NULL;

-- name: list_layouts
SELECT id, name, document::text AS document, created_at, updated_at
FROM import_layout WHERE client_id = $1 AND document IS NOT NULL
ORDER BY id LIMIT $2;

-- name: update_layout
UPDATE import_layout
SET name = $3, delimiter = $4, encoding = $5, has_header = $6, document = $7::jsonb,
    updated_at = now()
WHERE client_id = $1 AND id = $2 AND document IS NOT NULL
RETURNING id, name, document::text AS document, created_at, updated_at;

-- name: delete_layout
DELETE FROM import_layout WHERE client_id = $1 AND id = $2 AND document IS NOT NULL
RETURNING id;

-- name: journey_exists
SELECT EXISTS (SELECT 1 FROM journey WHERE id = $2 AND client_id = $1);

-- name: insert_firing_intent
-- Seed 003 §10: held until the import completes; finalize_job releases it to its queue.
INSERT INTO firing_intent (client_id, kind, import_job_id, params)
VALUES ($1, $2, $3, $4::jsonb);

-- name: insert_journey_classification
-- Seed 003 §9: the journey's mailing waits for the import; finalize_job moves it on.
INSERT INTO journey_classification_contact
    (journey_id, client_id, import_job_id, description, status, auto_start_journey_mailing)
VALUES ($1, $2, $3, $4, 'AWAITING_IMPORT', $5)
ON CONFLICT (import_job_id) DO NOTHING;

-- name: ping
SELECT 1;
