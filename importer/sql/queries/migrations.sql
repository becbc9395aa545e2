-- The migration's steps that cannot run inside its transaction (schema.sql): indexes built
-- CONCURRENTLY on tables other components write (no lock that stops their writes). A build that
-- was interrupted leaves an INVALID index, dropped and built again by the next migration.

-- name: index_state
-- Whether the index $1 exists, and whether it is valid (an interrupted or failed concurrent
-- build leaves it invalid).
SELECT i.indisvalid AS valid
FROM pg_class c
JOIN pg_index i ON i.indexrelid = c.oid
WHERE c.oid = to_regclass($1);

-- name: drop_contact_key_form_index
DROP INDEX CONCURRENTLY IF EXISTS contact_client_key_form_key;

-- name: create_contact_key_form_index
-- At most one live contact per client and normal form of its key, whoever writes: the importer
-- finds stored contacts by it (find_contacts), and a second live contact of one key cannot be
-- made by any writer.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS contact_client_key_form_key
    ON contact (client_id, importer_key_form(cpf_cnpj))
    WHERE cpf_cnpj IS NOT NULL AND deleted_at IS NULL;
