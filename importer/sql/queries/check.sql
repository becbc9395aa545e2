-- `importer db check`: what other writers left in the contact tables (core.legacy). Read-only;
-- $1 a client or NULL for every client. The scans stream through a cursor.

-- name: check_key_duplicates
-- Live contacts of one client whose keys share a normal form, oldest first (what blocks the
-- migration's contact_client_key_form_key); $2: at most this many groups, NULL for all.
SELECT client_id, importer_key_form(cpf_cnpj) AS key_form,
       array_agg(id ORDER BY id) AS contact_ids, array_agg(cpf_cnpj ORDER BY id) AS stored_keys
FROM contact
WHERE cpf_cnpj IS NOT NULL AND deleted_at IS NULL AND ($1::int IS NULL OR client_id = $1)
GROUP BY client_id, importer_key_form(cpf_cnpj)
HAVING count(*) > 1
ORDER BY client_id, key_form
LIMIT $2;

-- name: check_keys
-- Every live contact's stored key (validated in core.legacy).
SELECT client_id, id, cpf_cnpj::text AS cpf_cnpj
FROM contact
WHERE cpf_cnpj IS NOT NULL AND deleted_at IS NULL AND ($1::int IS NULL OR client_id = $1)
ORDER BY client_id, id;

-- name: check_channels
-- Live phones, WhatsApps and e-mails that may not be in the importer's form: a phone not in
-- E.164, an e-mail with surrounding space or an upper-case letter in its domain.
SELECT client_id, contact_id, id, channel_id, value::text AS value
FROM contact_details
WHERE deleted_at IS NULL AND ($1::int IS NULL OR client_id = $1)
  AND ((channel_id IN (1, 2) AND value !~ '^\+[1-9][0-9]{7,14}$')
       OR (channel_id = 3 AND (value <> btrim(value)
           OR split_part(value, '@', 2) <> lower(split_part(value, '@', 2)))))
ORDER BY client_id, contact_id, id;
