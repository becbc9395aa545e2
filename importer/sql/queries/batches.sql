-- A run's batches: the chunk ledger, its lanes and the resume checkpoint.
-- Named queries, loaded once with every queries/*.sql by importer/sql/__init__.py (a name
-- is defined in one file only). Every value is a bound parameter.

-- name: record_batch
-- The ledger row, last in the batch's transaction: a repeat finds the primary key taken, gets
-- no row back, and rolls the whole batch back. $15: the part (1: the whole batch; the pieces
-- of a split batch have their own rows, see Batch.part); $16: the line after the chunk (with
-- end_offset, the reader's checkpoint).
INSERT INTO import_chunk (job_id, chunk_no, partition, status, first_line, end_offset,
                          rows_read, inserted, updated, invalid, error, ignored, attempts,
                          error_message, part, end_line)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (job_id, chunk_no, partition, part) DO NOTHING
RETURNING 1;

-- name: given_up_error
-- Why a batch ($4: the lines of its rows) was given up after its retries: a discarded ledger
-- row of its chunk and partition and its rows reported chunk_discarded (a row rejected alone is
-- reported row_rejected instead). No row: applied, rejected row by row, or not recorded.
SELECT coalesce(c.error_message, '')
FROM import_chunk c
WHERE c.job_id = $1 AND c.chunk_no = $2 AND c.partition = $3 AND c.status = 'discarded'
  AND EXISTS (
      SELECT 1 FROM import_row_error e
      WHERE e.job_id = $1 AND e.line = ANY($4::integer[]) AND e.reason = 'chunk_discarded'
  )
LIMIT 1;

-- name: record_batch_fenced
-- record_batch for a worker's run, fenced by its lease in the same statement (no extra round
-- trip): the ledger row is written only while $17 holds the lease of the job, still in one of
-- the statuses $18. The job row is locked FOR KEY SHARE until the batch commits, so a reclaim
-- (FOR UPDATE) cannot slip between this check and the commit: it waits, or skips the job.
-- held = false: the lease is lost (the caller rolls the whole batch back); recorded = false:
-- the batch was already applied.
WITH lease AS (
    SELECT id FROM import_job
    WHERE id = $1 AND lease_owner = $17 AND status = ANY($18::text[])
    FOR KEY SHARE
),
recorded AS (
    INSERT INTO import_chunk (job_id, chunk_no, partition, status, first_line, end_offset,
                              rows_read, inserted, updated, invalid, error, ignored, attempts,
                              error_message, part, end_line)
    SELECT id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 FROM lease
    ON CONFLICT (job_id, chunk_no, partition, part) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT FROM lease) AS held, EXISTS (SELECT FROM recorded) AS recorded;

-- name: done_batches
SELECT chunk_no, partition, part FROM import_chunk WHERE job_id = $1;

-- name: open_lanes
-- The job's $2 lanes, each at the first chunk its partition has not committed whole (a resumed
-- job's ledger may already hold some); lanes that exist are left as they are.
INSERT INTO import_lane (job_id, partition, next_chunk)
SELECT $1, p, (
    SELECT coalesce(max(done.chunk_no) + 1, 0)
    FROM (
        SELECT chunk_no, row_number() OVER (ORDER BY chunk_no) - 1 AS rank
        FROM import_chunk
        WHERE job_id = $1 AND partition = p AND part = 1
    ) done
    WHERE done.chunk_no = done.rank
)
FROM generate_series(0, $2 - 1) AS p
ON CONFLICT (job_id, partition) DO NOTHING;

-- name: enter_lane
-- First in a whole batch's transaction: moves lane $2 of job $1 past chunk $3 if it stands at
-- it and nobody is splitting that chunk's batch. The row stays locked until the batch commits:
-- the next chunk's batch waits on it here and then finds the lane at its chunk. No row: the
-- lane is elsewhere, or the batch goes in by pieces (lane_position tells).
UPDATE import_lane SET next_chunk = $3 + 1
WHERE job_id = $1 AND partition = $2 AND next_chunk = $3
  AND split_chunk IS DISTINCT FROM $3
RETURNING next_chunk;

-- name: enter_lane_piece
-- First in a split piece's transaction: the lane must stand at the piece's chunk; marks (and
-- locks) it as going in by pieces, so no whole apply of the batch can follow. advance_lane
-- moves it on after the last piece.
UPDATE import_lane SET split_chunk = $3
WHERE job_id = $1 AND partition = $2 AND next_chunk = $3
RETURNING next_chunk;

-- name: advance_lane
UPDATE import_lane SET next_chunk = $3 + 1
WHERE job_id = $1 AND partition = $2 AND next_chunk = $3
RETURNING next_chunk;

-- name: lane_position
SELECT next_chunk, split_chunk FROM import_lane WHERE job_id = $1 AND partition = $2;

-- name: batch_parts
SELECT part FROM import_chunk WHERE job_id = $1 AND chunk_no = $2 AND partition = $3;

-- name: lanes_behind
-- The chunk every lane of the job has passed: the coordinator's progress and end condition.
SELECT min(next_chunk) FROM import_lane WHERE job_id = $1;

-- name: checkpoint
-- Where a resumed run starts reading: the last chunk of the prefix 0..c that every one of the
-- $2 partitions committed whole (part 1, done or discarded), with the reader's position after
-- it. No row when chunk 0 is not whole (or the ledger predates end_line).
WITH whole AS (
    SELECT chunk_no, min(end_offset) AS end_offset, min(end_line) AS end_line
    FROM import_chunk
    WHERE job_id = $1 AND part = 1
    GROUP BY chunk_no
    HAVING count(*) = $2 AND count(end_line) = $2
),
prefix AS (
    SELECT chunk_no, end_offset, end_line,
           chunk_no + 1 - row_number() OVER (ORDER BY chunk_no) AS gap
    FROM whole
)
SELECT chunk_no, end_offset, end_line FROM prefix WHERE gap = 0
ORDER BY chunk_no DESC
LIMIT 1;

-- name: insert_duplicates
-- A batch's competitions ($4: a JSON array's UTF-8 bytes, core.duplicates) and sources ($5: the
-- same, or NULL: none), in its own transaction.
INSERT INTO import_duplicate (job_id, chunk_no, batch_line, competitions, sources)
VALUES ($1, $2, $3, $4, $5);

-- name: open_error_tally
-- The error report's cap (import_error_tally): the job's tally, made by its first batch with
-- invalid rows or warnings.
INSERT INTO import_error_tally (job_id) VALUES ($1) ON CONFLICT (job_id) DO NOTHING;

-- name: take_error_room
-- Of the $2 invalid rows and warnings a batch of job $1 would store, how many fit under the
-- cap $3 (IMPORTER_MAX_ROW_ERRORS); the others are counted as left out. In the batch's
-- transaction: the tally's row stays locked until it commits, and a rollback takes the count
-- back with the rows.
WITH before AS (
    SELECT stored FROM import_error_tally WHERE job_id = $1 FOR UPDATE
),
room AS (
    SELECT least($2::bigint, greatest($3::bigint - stored, 0)) AS fits FROM before
)
UPDATE import_error_tally t
SET stored = t.stored + room.fits, left_out = t.left_out + $2 - room.fits
FROM room
WHERE t.job_id = $1
RETURNING room.fits;
