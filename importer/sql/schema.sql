-- importer schema. Idempotent: applying it twice changes nothing (`importer db migrate`).
-- Canonical contact tables keep the seed names (seed 003) so existing readers keep working.

CREATE TABLE IF NOT EXISTS contact (
    id              bigserial PRIMARY KEY,
    client_id       integer NOT NULL,
    name            text,
    cpf_cnpj        text COLLATE "C",   -- a normalized key: byte order, no locale work
    street_address  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at      timestamptz,
    import_job_id   uuid            -- provenance: the import that created the contact
) WITH (fillfactor = 90);           -- room for the HOT updates MERGE makes

CREATE UNIQUE INDEX IF NOT EXISTS idx_contact_client_cpf_cnpj_unique
    ON contact (client_id, cpf_cnpj)
    WHERE cpf_cnpj IS NOT NULL AND deleted_at IS NULL;

-- A stored CPF/CNPJ's normal form, whoever wrote it (seed 003 §8 layer 3 compares
-- regexp_replace(cpf_cnpj, '\D', '', 'g'): other writers store '529.982.247-25', ' 52998224725',
-- lower-case alphanumeric CNPJs, keys whose leading zeros a spreadsheet dropped). The SQL twin of
-- core.normalize's form (without the check digits: a stored key is found whether or not it is
-- valid): '.', '-', '/' and whitespace dropped, ASCII letters upper-cased, an all-digit key of
-- fewer than 11 digits padded to 11, of 12 or 13 to 14. The importer finds stored contacts by it
-- (contact_client_key_form_key, built by `importer db migrate` outside this transaction).
CREATE OR REPLACE FUNCTION importer_key_form(key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN k !~ '^[0-9]+$' THEN k
        WHEN length(k) < 11 THEN lpad(k, 11, '0')
        WHEN length(k) IN (12, 13) THEN lpad(k, 14, '0')
        ELSE k
    END
    FROM (SELECT upper(regexp_replace(key COLLATE "C", '[-./[:space:]]', '', 'g')) AS k) AS s
$$;

CREATE TABLE IF NOT EXISTS contact_details (
    id            bigserial PRIMARY KEY,
    contact_id    bigint NOT NULL REFERENCES contact (id),
    client_id     integer NOT NULL,
    channel_id    smallint NOT NULL CHECK (channel_id BETWEEN 1 AND 4),  -- 1 phone, 2 whatsapp, 3 email, 4 journey
    value         text COLLATE "C" NOT NULL,  -- normalized (E.164, email): byte order
    country_code  integer,
    country       text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz
);

-- Channels are a union: one live row per (contact, channel, value).
CREATE UNIQUE INDEX IF NOT EXISTS contact_details_contact_channel_value_key
    ON contact_details (contact_id, channel_id, value)
    WHERE deleted_at IS NULL;

-- An import keyed by a channel (layout "key": email, phone, whatsapp) finds contacts by value.
CREATE INDEX IF NOT EXISTS contact_details_client_channel_value_idx
    ON contact_details (client_id, channel_id, value)
    WHERE deleted_at IS NULL;

CREATE TABLE IF NOT EXISTS custom_field (
    id             serial PRIMARY KEY,
    client_id      integer NOT NULL,
    name           text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    import_job_id  uuid             -- the import whose unmapped column created it, if any
);

CREATE UNIQUE INDEX IF NOT EXISTS custom_field_client_name_key
    ON custom_field (client_id, lower(name));

CREATE TABLE IF NOT EXISTS contact_custom_fields (
    id               bigserial PRIMARY KEY,
    contact_id       bigint NOT NULL REFERENCES contact (id),
    client_id        integer NOT NULL,
    custom_field_id  integer NOT NULL REFERENCES custom_field (id),
    value            text NOT NULL,
    CONSTRAINT contact_custom_fields_contact_field_key UNIQUE (contact_id, custom_field_id)
) WITH (fillfactor = 90);           -- MERGE rewrites values in place (HOT updates)

-- Each session caches a block of ids: parallel writers append to different index pages instead
-- of all fighting over the rightmost one, and nextval rarely touches the shared sequence.
ALTER SEQUENCE contact_id_seq CACHE 1024;
ALTER SEQUENCE contact_details_id_seq CACHE 1024;
ALTER SEQUENCE contact_custom_fields_id_seq CACHE 1024;

-- Import layouts: column (by position or header name) -> attribute, channel or custom field.
CREATE TABLE IF NOT EXISTS import_layout (
    id          bigserial PRIMARY KEY,
    client_id   integer NOT NULL,
    name        text NOT NULL,
    delimiter   text CHECK (delimiter IN (',', ';', E'\t', '|')),
    encoding    text,
    has_header  boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS import_layout_field (
    id                 bigserial PRIMARY KEY,
    import_layout_id   bigint NOT NULL REFERENCES import_layout (id) ON DELETE CASCADE,
    index              integer,
    index_name         text,
    contact_attribute  text CHECK (contact_attribute IN ('name', 'cpf_cnpj', 'street_address')),
    channel_id         smallint CHECK (channel_id BETWEEN 1 AND 4),
    custom_field_id    integer REFERENCES custom_field (id),
    CHECK (num_nonnulls(contact_attribute, channel_id, custom_field_id) = 1),
    CHECK (num_nonnulls(index, index_name) >= 1)
);

-- Journeys (seed 003 section 9).
CREATE TABLE IF NOT EXISTS journey (
    id          bigserial PRIMARY KEY,
    client_id   integer NOT NULL,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per import job.
CREATE TABLE IF NOT EXISTS import_job (
    id                          uuid PRIMARY KEY,
    client_id                   integer NOT NULL,
    user_id                     text,
    kind                        text NOT NULL DEFAULT 'contacts',
    status                      text NOT NULL CHECK (status IN (
                                    'uploading', 'uploaded', 'queued', 'normalizing', 'ready',
                                    'importing', 'completed', 'completed_with_placeholders',
                                    'failed', 'cancelled')),
    source                      text NOT NULL,
    source_size                 bigint,
    source_sha256               text,
    input_format                text NOT NULL CHECK (input_format IN ('csv', 'jsonl', 'xlsx')),
    layout                      jsonb,
    conflict_strategy           text NOT NULL CHECK (conflict_strategy IN ('merge', 'discard')),
    chunk_size                  integer NOT NULL CHECK (chunk_size >= 1),
    partitions                  integer NOT NULL CHECK (partitions >= 1),
    has_sensitive_data          boolean NOT NULL DEFAULT false,
    has_underage_data           boolean NOT NULL DEFAULT false,
    data_processing_purpose     text,
    lgpd_processing_hypothesis  integer,
    has_internationalization    boolean NOT NULL DEFAULT false,
    journey_id                  bigint REFERENCES journey (id),
    auto_start_journey_mailing  boolean,
    tags                        jsonb,
    rows_read                   bigint NOT NULL DEFAULT 0,
    inserted                    bigint NOT NULL DEFAULT 0,
    updated                     bigint NOT NULL DEFAULT 0,
    invalid                     bigint NOT NULL DEFAULT 0,
    error                       bigint NOT NULL DEFAULT 0,
    ignored                     bigint NOT NULL DEFAULT 0,
    bytes_total                 bigint,
    created_custom_fields       integer NOT NULL DEFAULT 0,
    fail_reason                 text,
    last_operation_id           text,
    lease_owner                 text,
    lease_expires_at            timestamptz,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    started_at                  timestamptz,
    finished_at                 timestamptz
);

CREATE INDEX IF NOT EXISTS import_job_status_idx ON import_job (status) WHERE status IN ('queued', 'normalizing', 'ready', 'importing');

-- Jobs run by workers and shown by the API; added after the table's first release, so each
-- column is added on its own (ADD COLUMN IF NOT EXISTS keeps the file idempotent).
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS filename text;             -- the user's file name
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS storage_version text;      -- the pinned object version
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;
-- The owner's runbook (seed 001): a requeue starts the job's next run. run_generation numbers
-- the runs (1: the first); each run finalizes once and its outbox message ids carry the number
-- from the second run on. data_removed_at: the import's data was removed (a completed job may
-- then be requeued, past the one-time gate).
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS run_generation integer NOT NULL DEFAULT 1;
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS data_removed_at timestamptz;
-- File-level warnings, [{"code": ..., "message": ...}], one per code (suspect_encoding): shown
-- by the status, the CLI summary and as the error report's first rows.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS warnings jsonb NOT NULL DEFAULT '[]'::jsonb;
-- The run's reader reached the end of the file (the phase `finalizing`); a claim clears it.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS read_to_end_at timestamptz;
-- XLSX input: tables made before it accepted csv and jsonl only.
ALTER TABLE import_job DROP CONSTRAINT IF EXISTS import_job_input_format_check;
ALTER TABLE import_job ADD CONSTRAINT import_job_input_format_check
    CHECK (input_format IN ('csv', 'jsonl', 'xlsx'));
-- Command-line imports (`importer import`, `importer job resume`) run in the process that made
-- or resumed them, under that process's lease (renewed by its heartbeat, like a worker's): a
-- killed one is abandoned once the lease expires, and workers never claim one (in_process;
-- a requeue hands it to them). local_path: the imported file's absolute path, its size and
-- sha256 sealed in source_size and source_sha256.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS in_process boolean NOT NULL DEFAULT false;
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS local_path text;
-- Command-line imports made before held a lease that never expired: a running one is abandoned.
UPDATE import_job
SET in_process = true,
    lease_expires_at = CASE WHEN status IN ('normalizing', 'ready', 'importing') THEN now() END
WHERE lease_expires_at = 'infinity';
-- Preview, then apply (issue 14): a create with `preview` runs the file against the client's
-- contacts without writing one and rests in `ready` with its document (preview), waiting for an
-- apply (awaiting_apply: no worker claims it) until preview_expires_at, then `cancelled`.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS preview jsonb;  -- a preview's document
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS preview_requested boolean NOT NULL DEFAULT false;
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS awaiting_apply boolean NOT NULL DEFAULT false;
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS preview_expires_at timestamptz;
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS preview_applied_at timestamptz;  -- its apply came
CREATE INDEX IF NOT EXISTS import_job_preview_expiry_idx ON import_job (preview_expires_at)
    WHERE awaiting_apply;
-- The error threshold: `max_invalid` ("100" or "2%"); the whole file is validated before any
-- contact is written, and `validation` holds what that found ({"rows_read", "invalid",
-- "max_invalid", "exceeded"}). A job that exceeded it ends failed (too_many_invalid_rows) with
-- its validation's counts (finalize_job): no ledger row holds them.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS max_invalid text;
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS validation jsonb;
-- The duplicate-resolution report (core.duplicates) is computed and written unless a job says
-- `duplicates_report: false` at its creation.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS duplicates_report boolean NOT NULL DEFAULT true;

-- History, newest first: the keyset (created_at, id) read backwards from the cursor, per client
-- and per client and user. (The first index, (client_id, created_at DESC, id), could not serve
-- a descending id.)
DROP INDEX IF EXISTS import_job_client_created_idx;
CREATE INDEX IF NOT EXISTS import_job_client_history_idx ON import_job (client_id, created_at, id);
CREATE INDEX IF NOT EXISTS import_job_user_history_idx
    ON import_job (client_id, user_id, created_at, id);

-- The chunk ledger: a (chunk, key partition)'s writes, counters and done mark commit together.
-- part: 1 is the whole batch; a batch the database refused is split in halves, heap-numbered
-- (the halves of part p are 2p and 2p + 1), each piece with its own row (Batch.part).
CREATE TABLE IF NOT EXISTS import_chunk (
    job_id         uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    chunk_no       integer NOT NULL,
    partition      integer NOT NULL,
    part           integer NOT NULL DEFAULT 1 CHECK (part >= 1),
    status         text NOT NULL CHECK (status IN ('done', 'discarded')),
    first_line     integer NOT NULL,
    end_offset     bigint NOT NULL,
    rows_read      integer NOT NULL DEFAULT 0,
    inserted       integer NOT NULL DEFAULT 0,
    updated        integer NOT NULL DEFAULT 0,
    invalid        integer NOT NULL DEFAULT 0,
    error          integer NOT NULL DEFAULT 0,
    ignored        integer NOT NULL DEFAULT 0,
    attempts       integer NOT NULL DEFAULT 1,
    error_message  text,
    done_at        timestamptz NOT NULL DEFAULT now(),
    end_line       integer,  -- the line after the chunk: with end_offset, the reader's checkpoint
    PRIMARY KEY (job_id, chunk_no, partition, part),
    CHECK (rows_read = inserted + updated + invalid + error + ignored)
);

-- Poison-row isolation: ledgers made before it get the part column and a primary key over it.
ALTER TABLE import_chunk ADD COLUMN IF NOT EXISTS part integer NOT NULL DEFAULT 1;
-- Checkpoint resume: ledgers made before it have no end_line (their jobs resume from the start).
ALTER TABLE import_chunk ADD COLUMN IF NOT EXISTS end_line integer;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
        WHERE i.indrelid = 'import_chunk'::regclass AND i.indisprimary AND a.attname = 'part'
    ) THEN
        ALTER TABLE import_chunk DROP CONSTRAINT import_chunk_pkey,
            ADD PRIMARY KEY (job_id, chunk_no, partition, part);
    END IF;
END $$;

-- Multi-instance imports (RABBITMQ_URL): each key partition of a job is a lane whose batches
-- apply in chunk order, on whichever instance receives them. A batch enters its lane only when
-- next_chunk is its chunk, and moves it on in the same transaction as its writes and ledger row.
CREATE TABLE IF NOT EXISTS import_lane (
    job_id      uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    partition   integer NOT NULL CHECK (partition >= 0),
    next_chunk  integer NOT NULL DEFAULT 0 CHECK (next_chunk >= 0),
    split_chunk integer,  -- = next_chunk while that chunk's batch goes in piece by piece
    PRIMARY KEY (job_id, partition)
);

-- A layout's merge policy (core.policy): what a MERGE import with a non-default policy already
-- did to a contact that existed before it, so its later batches decide against the pre-import
-- state whatever the chunking. target: 'name', 'street_address', 'custom:<lower-case name>' (the
-- import gave the field its value), 'channel:<id>' (the import replaced that channel; replaced:
-- the details it soft-deleted, brought back when a later batch has their values). Rows only for
-- such imports; they go with the job (and with its ledger when its data is removed).
CREATE TABLE IF NOT EXISTS import_merge_mark (
    job_id      uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    contact_id  bigint NOT NULL,
    target      text NOT NULL,
    replaced    bigint[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (job_id, contact_id, target)
);

-- Undo (issue 15): the statuses undoing and undone; whether the job journaled its batches (a
-- job from before the journal has none: its data goes by remove-data), and when it was undone.
ALTER TABLE import_job DROP CONSTRAINT IF EXISTS import_job_status_check;
ALTER TABLE import_job ADD CONSTRAINT import_job_status_check CHECK (status IN (
    'uploading', 'uploaded', 'queued', 'normalizing', 'ready', 'importing', 'completed',
    'completed_with_placeholders', 'failed', 'cancelled', 'undoing', 'undone'));
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS journaled boolean NOT NULL DEFAULT false;
ALTER TABLE import_job ALTER COLUMN journaled SET DEFAULT true;  -- every job from now on
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS undone_at timestamptz;

-- Retention (issue 15): when an ended import's personal data was purged (its source object, the
-- raw values of its reports, its undo journal); the sweep finds the due ones by their end.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS purged_at timestamptz;
CREATE INDEX IF NOT EXISTS import_job_retention_idx ON import_job (finished_at)
    WHERE purged_at IS NULL AND finished_at IS NOT NULL;

-- Undo (issue 15): each batch journals, in its own transaction and in one row (one statement, no
-- per-contact index: a row per contact with two indexes cost the import a third), what it
-- changes of the contacts that existed before the import (the contacts it creates carry its
-- id: contact.import_job_id, and its replace's soft-deleted details are in
-- import_merge_mark.replaced). Pairwise arrays: the ids of the contacts it created; the rows
-- (id, name, street_address, updated_at) before it of the stored contacts whose name or address
-- it changes, and after_at, the batch transaction's now() (their updated_at after it); the custom
-- values it inserts or changes (contact, field, the value before — NULL: none — and after); the
-- channels it adds to stored contacts. The undo restores the rows newest batch first (the
-- batches of a key partition apply in chunk order and touch only its contacts), so each
-- contact ends at its first before-image, and deletes each row it restored: what is left is its
-- ledger. after_at and the last batch's values are the after-images its conflict check compares.
-- The arrays go to TOAST compressed by lz4 (below), several times cheaper than pglz.
CREATE TABLE IF NOT EXISTS import_journal (
    job_id            uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    chunk_no          integer NOT NULL,
    partition         integer NOT NULL,
    part              integer NOT NULL,
    after_at          timestamptz NOT NULL,
    created           bigint[] NOT NULL DEFAULT '{}',
    contact_ids       bigint[] NOT NULL DEFAULT '{}',
    names             text[] NOT NULL DEFAULT '{}',
    street_addresses  text[] NOT NULL DEFAULT '{}',
    updated_ats       timestamptz[] NOT NULL DEFAULT '{}',
    custom_contacts   bigint[] NOT NULL DEFAULT '{}',
    custom_fields     integer[] NOT NULL DEFAULT '{}',
    custom_befores    text[] NOT NULL DEFAULT '{}',
    custom_afters     text[] NOT NULL DEFAULT '{}',
    detail_contacts   bigint[] NOT NULL DEFAULT '{}',
    detail_channels   smallint[] NOT NULL DEFAULT '{}',
    detail_values     text[] COLLATE "C" NOT NULL DEFAULT '{}',
    PRIMARY KEY (job_id, chunk_no, partition, part)
);
-- The order a batch's split pieces applied in: part p's halves are 2p and 2p + 1 (the whole
-- batch is 1), so p's bits shifted left to 32 order the pieces that applied as they did.
CREATE OR REPLACE FUNCTION import_part_order(part integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN part::bigint << (32 - length(ltrim(part::bit(32)::text, '0')));

-- lz4 where the server has it (PostgreSQL 14+ built --with-lz4, as Debian's and the images'
-- are); elsewhere the default pglz, the same data.
DO $$
BEGIN
    IF (SELECT attcompression FROM pg_attribute
        WHERE attrelid = 'import_journal'::regclass AND attname = 'created') = 'l' THEN
        RETURN;  -- done before: no lock taken
    END IF;
    ALTER TABLE import_journal
        ALTER COLUMN created SET COMPRESSION lz4,
        ALTER COLUMN contact_ids SET COMPRESSION lz4,
        ALTER COLUMN names SET COMPRESSION lz4,
        ALTER COLUMN street_addresses SET COMPRESSION lz4,
        ALTER COLUMN updated_ats SET COMPRESSION lz4,
        ALTER COLUMN custom_contacts SET COMPRESSION lz4,
        ALTER COLUMN custom_fields SET COMPRESSION lz4,
        ALTER COLUMN custom_befores SET COMPRESSION lz4,
        ALTER COLUMN custom_afters SET COMPRESSION lz4,
        ALTER COLUMN detail_contacts SET COMPRESSION lz4,
        ALTER COLUMN detail_channels SET COMPRESSION lz4,
        ALTER COLUMN detail_values SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$$;

-- The journal before it (four tables: a row per contact changed, per custom value, per channel
-- added, per batch's created ids) becomes import_journal rows, then its tables go.
-- A job's created ids keep their batch; its contacts' before-images (the first) go into one row
-- per after-image they had (the last batch that changed each: its transaction's now()), its
-- custom values and channels into the first of those, all before its batches (chunk_no < 0:
-- restored last; the rows of one contact are never in two of them). One statement: a repeat
-- finds no old table and does nothing.
DO $$
BEGIN
    IF to_regclass('import_journal_created') IS NOT NULL
       AND to_regclass('import_journal_contact') IS NOT NULL
       AND to_regclass('import_journal_custom') IS NOT NULL
       AND to_regclass('import_journal_detail') IS NOT NULL THEN
        INSERT INTO import_journal (job_id, chunk_no, partition, part, after_at, created)
        SELECT r.job_id, r.chunk_no, r.partition, r.part, j.updated_at, r.ids
        FROM import_journal_created r JOIN import_job j ON j.id = r.job_id
        ON CONFLICT DO NOTHING;
        WITH images AS (
            SELECT job_id, after_updated_at, -dense_rank() OVER (
                       PARTITION BY job_id ORDER BY after_updated_at) AS chunk_no
            FROM import_journal_contact GROUP BY job_id, after_updated_at
        ),
        jobs AS (  -- every job with old rows; each one's first row: -1
            SELECT job_id FROM import_journal_contact
            UNION SELECT job_id FROM import_journal_custom
            UNION SELECT job_id FROM import_journal_detail
        )
        INSERT INTO import_journal (job_id, chunk_no, partition, part, after_at, contact_ids,
                                    names, street_addresses, updated_ats)
        SELECT coalesce(i.job_id, o.job_id), coalesce(i.chunk_no, -1), 0, 1,
               coalesce(i.after_updated_at, j.updated_at),
               coalesce(c.ids, '{}'), coalesce(c.names, '{}'), coalesce(c.addresses, '{}'),
               coalesce(c.updated_ats, '{}')
        FROM jobs o
        JOIN import_job j ON j.id = o.job_id
        LEFT JOIN images i ON i.job_id = o.job_id
        LEFT JOIN LATERAL (
            SELECT array_agg(x.contact_id) AS ids, array_agg(x.name) AS names,
                   array_agg(x.street_address) AS addresses, array_agg(x.updated_at) AS updated_ats
            FROM import_journal_contact x
            WHERE x.job_id = i.job_id AND x.after_updated_at = i.after_updated_at
        ) c ON true
        ON CONFLICT DO NOTHING;
        UPDATE import_journal r
        SET custom_contacts = v.contacts, custom_fields = v.fields, custom_befores = v.befores,
            custom_afters = v.afters
        FROM (SELECT job_id, array_agg(contact_id) AS contacts,
                     array_agg(custom_field_id) AS fields,
                     array_agg(before) AS befores, array_agg(after) AS afters
              FROM import_journal_custom GROUP BY job_id) v
        WHERE r.job_id = v.job_id AND r.chunk_no = -1 AND r.partition = 0 AND r.part = 1;
        UPDATE import_journal r
        SET detail_contacts = d.contacts, detail_channels = d.channels, detail_values = d.vals
        FROM (SELECT job_id, array_agg(contact_id) AS contacts, array_agg(channel_id) AS channels,
                     array_agg(value) AS vals
              FROM import_journal_detail GROUP BY job_id) d
        WHERE r.job_id = d.job_id AND r.chunk_no = -1 AND r.partition = 0 AND r.part = 1;
    END IF;
END $$;
DROP TABLE IF EXISTS import_journal_contact, import_journal_custom, import_journal_detail,
    import_journal_created;

-- Invalid rows and warnings, with the 1-based physical line where the record starts.
CREATE TABLE IF NOT EXISTS import_row_error (
    job_id       uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    line         integer NOT NULL,
    column_name  text,
    reason       text NOT NULL,
    severity     text NOT NULL CHECK (severity IN ('invalid', 'warning', 'error')),
    value        text
);

CREATE INDEX IF NOT EXISTS import_row_error_job_line_idx ON import_row_error (job_id, line);

-- The duplicate-resolution report (core.duplicates): one row per batch (or piece of a split
-- batch) that found competitions, inserted in the batch's own transaction (a retried batch
-- leaves nothing twice). competitions: a JSON array (UTF-8, as orjson wrote it: stored as bytes,
-- parsed only when the report is read) of [key, field, winner_value, winner_line (null: the
-- stored contact's value won), losing_lines, loser_stored, rule]. One row per batch, not per
-- competition: a batch into stored contacts finds thousands, and a row each cost the import 4x
-- more (a foreign-key check, a tuple, an index entry each; TOAST compresses the array ~4x).
-- The report orders a (key, field)'s competitions by (chunk_no, batch_line: the first line of
-- the batch or piece) and combines them.
CREATE TABLE IF NOT EXISTS import_duplicate (
    job_id        uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    chunk_no      integer NOT NULL,
    batch_line    integer NOT NULL,
    competitions  bytea NOT NULL
);

CREATE INDEX IF NOT EXISTS import_duplicate_job_idx ON import_duplicate (job_id);
-- Issue 25: a batch's sources (core.duplicates.batch_sources: the lines that gave values it wrote
-- without a competition), read with the competitions so a later chunk's names the import's line.
ALTER TABLE import_duplicate ADD COLUMN IF NOT EXISTS sources bytea;

-- Seed 000: one finalization row per import; the primary key makes finalization atomic.
CREATE TABLE IF NOT EXISTS import_batch_finalized (
    batch_id      uuid PRIMARY KEY REFERENCES import_job (id) ON DELETE CASCADE,
    user_id       text,
    client_id     integer NOT NULL,
    total         bigint NOT NULL,
    imported      bigint NOT NULL,
    updated       bigint NOT NULL,
    failed        bigint NOT NULL,
    finalized_at  timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS import_batch_finalized_user_idx ON import_batch_finalized (user_id, finalized_at);
ALTER TABLE import_batch_finalized ADD COLUMN IF NOT EXISTS undone_at timestamptz;  -- its undo

-- Messages written in the transaction that causes them; a relay publishes them (at least once).
CREATE TABLE IF NOT EXISTS outbox (
    id            bigserial PRIMARY KEY,
    message_id    text NOT NULL UNIQUE,   -- stable: a re-publish carries the same id
    topic         text NOT NULL,          -- notification, hsm/importing-intent, sms/firing-intent, ...
    payload       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);

CREATE INDEX IF NOT EXISTS outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;

-- The relay LISTENs on importer_outbox: a committed insert wakes it (it polls besides, so a lost
-- notification only delays). One notification per statement; PostgreSQL folds repeats in a
-- transaction.
CREATE OR REPLACE FUNCTION importer_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('importer_outbox', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION importer_outbox_notify();

-- Seed 003 section 9: the journey's mailing waits for the import.
CREATE TABLE IF NOT EXISTS journey_classification_contact (
    id                          bigserial PRIMARY KEY,
    journey_id                  bigint NOT NULL REFERENCES journey (id),
    client_id                   integer NOT NULL,
    import_job_id               uuid NOT NULL UNIQUE REFERENCES import_job (id) ON DELETE CASCADE,
    description                 text,
    status                      text NOT NULL CHECK (status IN (
                                    'AWAITING_IMPORT', 'ACTIVE', 'PAUSED', 'DONE', 'CANCELED', 'EXPIRED')),
    auto_start_journey_mailing  boolean NOT NULL DEFAULT false,
    contact_amount              bigint NOT NULL DEFAULT 0,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- Seed 003 section 9: the contacts an import adds to its journey (those whose rows carry a
-- journey channel), one row per (classification, journey detail).
CREATE TABLE IF NOT EXISTS journey_contact (
    id                                 bigserial PRIMARY KEY,
    journey_classification_contact_id  bigint NOT NULL
        REFERENCES journey_classification_contact (id) ON DELETE CASCADE,
    client_id                          integer NOT NULL,
    contact_id                         bigint NOT NULL REFERENCES contact (id),
    contact_detail_id                  bigint NOT NULL REFERENCES contact_details (id),
    created_at                         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (journey_classification_contact_id, contact_detail_id)
);

-- Issue 25: an undo deletes channels journey links may point to; the foreign key's check (and the
-- undo's conflict check) find the links by detail, not by scanning every journey's links.
CREATE INDEX IF NOT EXISTS journey_contact_contact_detail_idx ON journey_contact (contact_detail_id);

-- Seed 003 section 10: a firing intent released only when its import completes.
CREATE TABLE IF NOT EXISTS firing_intent (
    id             bigserial PRIMARY KEY,
    client_id      integer NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('hsm', 'email', 'sms')),
    import_job_id  uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    params         jsonb NOT NULL DEFAULT '{}',
    released_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS firing_intent_job_idx ON firing_intent (import_job_id);

-- layouts (API)
-- The layout document exactly as the CLI's --layout file holds it (validated by parse_layout);
-- delimiter, encoding and has_header mirror it for the seed's readers.
ALTER TABLE import_layout ADD COLUMN IF NOT EXISTS document jsonb;
CREATE INDEX IF NOT EXISTS import_layout_client_idx ON import_layout (client_id, id);

-- Bounded tables (issue 26). Every table an import or an event adds rows to is swept
-- (importer/services/maintenance.py): an ended import's journal, reports' raw values, ledger
-- and lanes at IMPORTER_RETENTION_DAYS; published outbox rows at IMPORTER_OUTBOX_RETENTION_DAYS;
-- ended webhook deliveries and their attempts at IMPORTER_WEBHOOK_RETENTION_DAYS; the error
-- report by a cap per job. The job row, its finalization row and its error report's lines and
-- reasons (at most the cap) stay: the import's history.
--
-- The error report's cap (IMPORTER_MAX_ROW_ERRORS): the invalid rows and warnings a job stored,
-- and those past the cap it counted without storing them (a wrong 50M-row file stores the cap,
-- not 50M rows). One row per job that reported any; a batch takes its room here, in its own
-- transaction, just before it writes its issues (the row stays locked until the batch commits:
-- the batches of one job with issues commit one after another from there, a short tail).
CREATE TABLE IF NOT EXISTS import_error_tally (
    job_id    uuid PRIMARY KEY REFERENCES import_job (id) ON DELETE CASCADE,
    stored    bigint NOT NULL DEFAULT 0 CHECK (stored >= 0),
    left_out  bigint NOT NULL DEFAULT 0 CHECK (left_out >= 0)
);

-- The claim (claim_job) walks the claimable jobs oldest first and probes each one's client for
-- a live lease; a queued job's place (import_queue_positions) counts the claimable jobs older
-- than it (an index-only count, less the few under a live lease) and probes each client's
-- oldest (issue 26: 100,000 waiting jobs of 1,000 clients).
CREATE INDEX IF NOT EXISTS import_job_claim_idx ON import_job (created_at, id)
    WHERE status IN ('queued', 'normalizing', 'ready', 'importing') AND NOT in_process
      AND NOT awaiting_apply;
CREATE INDEX IF NOT EXISTS import_job_client_lease_idx ON import_job (client_id, lease_expires_at)
    WHERE status IN ('queued', 'normalizing', 'ready', 'importing')
      AND lease_expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS import_job_client_waiting_idx ON import_job (client_id, created_at, id)
    WHERE status IN ('queued', 'normalizing', 'ready', 'importing');

-- The claim's order (claim_job) and a queued job's place in it (queue_position): every job a
-- worker may claim now (queued, or running under an expired lease), numbered from 1. First the
-- oldest waiting job of each client without a running import; then the others (a client's
-- later jobs, the jobs of a client whose import runs), oldest first. A client runs an import
-- while a worker holds a live lease on one of its jobs or while its turn (try_client_turn's
-- advisory lock) is held; a command-line import's live lease counts too, and its job is never in
-- the queue (in_process: it runs where it was started or resumed). `leases` feeds the claim's
-- fair-share cap.
DROP VIEW IF EXISTS import_job_progress;
DROP VIEW IF EXISTS import_job_listing;
DROP FUNCTION IF EXISTS import_queue_position(uuid, integer, timestamptz);
DROP VIEW IF EXISTS import_claim_queue;
CREATE VIEW import_claim_queue AS
WITH leased AS (
    SELECT client_id, count(*) AS leases FROM import_job
    WHERE status IN ('queued', 'normalizing', 'ready', 'importing')
      AND lease_owner IS NOT NULL AND lease_expires_at > now()
    GROUP BY client_id
),
turns AS (
    SELECT objid::integer AS client_id FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 1243542 AND objsubid = 2 AND granted
),
waiting AS (
    SELECT j.id, j.client_id, j.created_at, coalesce(l.leases, 0) AS leases,
           l.client_id IS NOT NULL
               OR EXISTS (SELECT FROM turns t WHERE t.client_id = j.client_id) AS running,
           row_number() OVER (PARTITION BY j.client_id ORDER BY j.created_at, j.id) AS nth
    FROM import_job j LEFT JOIN leased l ON l.client_id = j.client_id
    WHERE j.status IN ('queued', 'normalizing', 'ready', 'importing')
      AND coalesce(j.lease_expires_at, '-infinity') <= now()
      AND NOT j.in_process  -- a command-line import runs where it was started or resumed
      AND NOT j.awaiting_apply  -- a preview resting until its apply
)
SELECT id, client_id, leases,
       row_number() OVER (ORDER BY running OR nth > 1, created_at, id) AS position
FROM waiting;

-- Waiting jobs' places in the claim's order (the import_claim_queue view's position) without
-- numbering the whole queue (issue 26: with 100,000 waiting jobs that took half a second a
-- status), for one job (a status) or a history page's queued jobs at once. The heads (each
-- client's oldest waiting job: one probe of import_job_client_waiting_idx per client) of the
-- clients that run nothing come first, oldest first; then every other waiting job, oldest
-- first. So a head is after the heads older than it; another job after every head and the
-- other jobs older than it: the claimable jobs up to the newest wanted one are numbered in one
-- pass of import_job_claim_idx (index-only), less the few under a live lease. A job that is
-- not queued and waiting gets no row.
CREATE OR REPLACE FUNCTION import_queue_positions(jobs uuid[])
RETURNS TABLE (job_id uuid, job_position bigint) LANGUAGE sql STABLE AS $$
WITH RECURSIVE heads AS (
    (SELECT client_id, created_at, id FROM import_job
     WHERE status IN ('queued', 'normalizing', 'ready', 'importing')
       AND coalesce(lease_expires_at, '-infinity') <= now() AND NOT in_process
       AND NOT awaiting_apply
     ORDER BY client_id, created_at, id LIMIT 1)
    UNION ALL
    SELECT n.* FROM heads h CROSS JOIN LATERAL (
        SELECT client_id, created_at, id FROM import_job
        WHERE status IN ('queued', 'normalizing', 'ready', 'importing') AND client_id > h.client_id
          AND coalesce(lease_expires_at, '-infinity') <= now() AND NOT in_process
          AND NOT awaiting_apply
        ORDER BY client_id, created_at, id LIMIT 1
    ) n
),
running AS MATERIALIZED (
    SELECT client_id FROM import_job
    WHERE status IN ('queued', 'normalizing', 'ready', 'importing') AND lease_owner IS NOT NULL
      AND lease_expires_at IS NOT NULL AND lease_expires_at > now()
    UNION
    SELECT objid::integer FROM pg_locks
    WHERE locktype = 'advisory' AND classid = 1243542 AND objsubid = 2 AND granted
),
first AS MATERIALIZED (
    SELECT created_at, id, row_number() OVER (ORDER BY created_at, id) AS nth
    FROM heads WHERE client_id NOT IN (SELECT client_id FROM running)
),
wanted AS MATERIALIZED (
    SELECT id, created_at FROM import_job
    WHERE id = ANY(jobs) AND status = 'queued'
      AND coalesce(lease_expires_at, '-infinity') <= now() AND NOT in_process
      AND NOT awaiting_apply
),
newest AS MATERIALIZED (
    SELECT created_at, id FROM wanted ORDER BY created_at DESC, id DESC LIMIT 1
),
numbered AS (  -- 1 + the claimable jobs older than each, live leases included: in index order
    SELECT c.id, row_number() OVER (ORDER BY c.created_at, c.id) AS nth
    FROM import_job c
    WHERE c.status IN ('queued', 'normalizing', 'ready', 'importing') AND NOT c.in_process
      AND NOT c.awaiting_apply
      AND (c.created_at, c.id) <= ((SELECT created_at FROM newest), (SELECT id FROM newest))
),
leased AS MATERIALIZED (
    SELECT created_at, id FROM import_job
    WHERE status IN ('queued', 'normalizing', 'ready', 'importing') AND NOT in_process
      AND NOT awaiting_apply AND lease_expires_at IS NOT NULL AND lease_expires_at > now()
)
SELECT w.id,
       coalesce(
           f.nth,
           (SELECT count(*) FROM first)
           - (SELECT count(*) FROM first o WHERE (o.created_at, o.id) < (w.created_at, w.id))
           + n.nth
           - (SELECT count(*) FROM leased x WHERE (x.created_at, x.id) < (w.created_at, w.id))
       )
FROM wanted w
JOIN numbered n ON n.id = w.id
LEFT JOIN first f ON f.id = w.id
$$;

-- A job with its progress: the furthest offset a done chunk reached (end offsets grow with
-- chunk_no: one backward index probe) and, while the job runs, the ledger's counters (a terminal
-- job's row holds them), what it committed in the last 10 seconds (progress.RATE_WINDOW_S: rows
-- and the bytes past the furthest offset reached before them) and whether any batch is done;
-- a queued job's place in the claim's order; the error report's rows left out past its cap.
-- Recreated on every migrate: `j.*` is expanded when -- the view is made, so a column added to import_job must reach it.
CREATE VIEW import_job_listing AS
SELECT j.*, coalesce(last.end_offset, 0) AS bytes_read, last.end_offset IS NOT NULL AS batches_done,
       live.*,
       coalesce(last.end_offset, 0) - coalesce(live.offset_before_window, 0) AS recent_bytes,
       coalesce(tally.left_out, 0) AS row_errors_left_out
FROM import_job j
LEFT JOIN import_error_tally tally ON tally.job_id = j.id
LEFT JOIN LATERAL (
    SELECT end_offset FROM import_chunk WHERE job_id = j.id ORDER BY chunk_no DESC LIMIT 1
) AS last ON true
CROSS JOIN LATERAL (
    SELECT sum(rows_read) AS live_rows_read, sum(inserted) AS live_inserted,
           sum(updated) AS live_updated, sum(invalid) AS live_invalid,
           sum(error) AS live_error, sum(ignored) AS live_ignored,
           coalesce(sum(rows_read) FILTER (WHERE done_at > now() - interval '10 seconds'), 0)
               AS recent_rows,
           max(end_offset) FILTER (WHERE done_at <= now() - interval '10 seconds')
               AS offset_before_window
    FROM import_chunk
    WHERE job_id = j.id
      AND j.status NOT IN ('completed', 'completed_with_placeholders', 'failed', 'cancelled')
) AS live;
-- One job's: the listing with its place in the queue. (The history pages read the listing and
-- place their page's queued jobs at once: import_queue_positions.)
CREATE VIEW import_job_progress AS
SELECT l.*,
       CASE WHEN l.status = 'queued' THEN (
           SELECT q.job_position FROM import_queue_positions(ARRAY[l.id]) q
       ) END AS queue_position
FROM import_job_listing l;

-- A preview's valid rows, staged while the file is read and planned once it is
-- (importer/adapters/postgres/previews.py, importer/core/preview.py): then deleted. Unlogged: a
-- preview lost in a crash is run again. As JSON text (NULL: none): `details` the row's channels
-- ([[channel, value, country_code, country], ...]), `custom_fields` its custom values as the row
-- has them ([[name, value], ...]), `custom_values` the same by lower-case name as the fold keys
-- them ({"plano": "Pro"}: a row's last column of a name wins; the set-based tally reads it).
-- `part`: the key partition of the row's batch (each partition is tallied on its own);
-- `channels`: the channels the row has values of, as bits (1 << channel; NULL: none).
CREATE UNLOGGED TABLE IF NOT EXISTS import_preview_row (
    job_id          uuid NOT NULL,
    part            smallint NOT NULL DEFAULT 0,
    cpf_cnpj        text NOT NULL,
    line            integer NOT NULL,
    name            text,
    street_address  text,
    details         text,
    custom_fields   text,
    custom_values   text,
    channels        smallint
);
ALTER TABLE import_preview_row ADD COLUMN IF NOT EXISTS details text;
ALTER TABLE import_preview_row ADD COLUMN IF NOT EXISTS custom_fields text;
ALTER TABLE import_preview_row ADD COLUMN IF NOT EXISTS custom_values text;
ALTER TABLE import_preview_row ADD COLUMN IF NOT EXISTS part smallint NOT NULL DEFAULT 0;
ALTER TABLE import_preview_row ADD COLUMN IF NOT EXISTS channels smallint;
ALTER TABLE import_preview_row DROP COLUMN IF EXISTS extra;  -- the one JSON column before
CREATE INDEX IF NOT EXISTS import_preview_row_job_part_idx ON import_preview_row (job_id, part);
DROP INDEX IF EXISTS import_preview_row_job_idx;  -- (job_id) alone, before the partitions

-- Completion webhooks (issue 15, point 3). A client's webhook settings: the secret every
-- delivery is signed with (HMAC-SHA256 of the body) and the default notify_url of its imports;
-- set by the owner (`importer client webhook`). A job's own notify_url (a create option) wins.
CREATE TABLE IF NOT EXISTS client_webhook (
    client_id   integer PRIMARY KEY,
    secret      text NOT NULL CHECK (length(secret) >= 16),
    notify_url  text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS notify_url text;

-- One row per event to deliver, written in the transaction that causes it (finalize_job; undo
-- later), so a kill -9 loses none. delivery_id is the event's outbox message id
-- (`notification:<job>[:<run>]`): the receiver's dedupe key, the same on every attempt. body is
-- the job document frozen at the first attempt (every retry sends the same bytes). A claim
-- moves next_attempt_at past the attempt's timeout (a lease: a crashed attempt is due again
-- after it) and counts the attempt; delivered_at or gave_up_at ends the row.
CREATE TABLE IF NOT EXISTS webhook_delivery (
    id               bigserial PRIMARY KEY,
    delivery_id      text NOT NULL UNIQUE,
    job_id           uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    client_id        integer NOT NULL,
    event            text NOT NULL,
    url              text NOT NULL,
    body             text,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    delivered_at     timestamptz,
    gave_up_at       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS webhook_delivery_due_idx ON webhook_delivery (next_attempt_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;

-- Every attempt: inserted when it is claimed (status and error NULL: in flight, or cut by a
-- crash), completed with the receiver's status code or the error and the duration.
CREATE TABLE IF NOT EXISTS webhook_attempt (
    delivery_id  text NOT NULL REFERENCES webhook_delivery (delivery_id) ON DELETE CASCADE,
    attempt      integer NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    status_code  integer,
    error        text,
    duration_ms  integer,
    PRIMARY KEY (delivery_id, attempt)
);

-- A channel-keyed import's key groups (core.keys.KeyGroups): each value of the key channel that
-- a stored contact with several of them has, and that contact's smallest value, whose hash is
-- the partition of its rows. Read by the job's first run and kept as long as its ledger (the
-- undo and remove-data delete both): every run that resumes from the ledger cuts the same
-- batches. ``whole``: too many to keep, every row in partition 0. Personal data: the
-- retention sweep deletes them with the journal.
CREATE TABLE IF NOT EXISTS import_key_groups (
    job_id      uuid PRIMARY KEY REFERENCES import_job (id) ON DELETE CASCADE,
    whole       boolean NOT NULL,
    key_values  text[] NOT NULL,
    canonicals  text[] NOT NULL
);

-- The columns step (issue 29). A job's mapping set through it (PUT /v1/imports/{id}/columns,
-- stored as its layout) also keeps, per named column, the header as core.layout.header_key folds
-- it and the target's layout word: finalize_job's caller adds them to the client's memory once
-- the import completes (columns_remembered_at, once per job), and removing the import's data or
-- purging it at retention takes them back out.
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS column_mapping jsonb;  -- [[header_key, word], ...]
ALTER TABLE import_job ADD COLUMN IF NOT EXISTS columns_remembered_at timestamptz;

-- What each client mapped each header to: the first source of the columns step's suggestions.
-- `uses`: how many remembered imports mapped it so (an entry at 0 is deleted). Tenant data:
-- every statement is scoped by client_id.
CREATE TABLE IF NOT EXISTS import_column_memory (
    client_id     integer NOT NULL,
    header_key    text NOT NULL,
    target        text NOT NULL,   -- a layout word: name, phone, custom:<field>, ignore
    uses          integer NOT NULL CHECK (uses > 0),
    last_used_at  timestamptz NOT NULL,
    PRIMARY KEY (client_id, header_key, target)
);

-- Bounded tables (issue 26): the sweeps find what is due by age, oldest first, without
-- reading the rest.
CREATE INDEX IF NOT EXISTS outbox_published_idx ON outbox (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_delivery_ended_idx
    ON webhook_delivery ((coalesce(delivered_at, gave_up_at)))
    WHERE delivered_at IS NOT NULL OR gave_up_at IS NOT NULL;
