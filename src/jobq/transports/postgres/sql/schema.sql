-- jobq schema migrations for PostgreSQL.
-- Each block "-- migration: N <title>" runs once, in order, inside one transaction guarded by
-- an advisory lock, so concurrent `jobq init` runs are safe. {schema}, {jobs}, {migrations}
-- and {notify_fn} are identifiers filled in with psycopg.sql.Identifier; never edit an applied
-- block, add a new one.

-- migration: 1 jobs table, claim indexes, statement-level NOTIFY
CREATE TABLE IF NOT EXISTS {jobs} (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT jsonb_build_object(),
    status       text        NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'done', 'dead')),
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    run_at       timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz,
    locked_by    text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

-- The claim scans only eligible work, in the order it is handed out.
CREATE INDEX IF NOT EXISTS jobs_pending_idx ON {jobs} (queue, run_at, id) WHERE status = 'pending';
-- Rescue of expired leases looks only at running rows.
CREATE INDEX IF NOT EXISTS jobs_running_idx ON {jobs} (locked_until) WHERE status = 'running';
-- Dead-letter listing and requeue.
CREATE INDEX IF NOT EXISTS jobs_dead_idx ON {jobs} (queue, id) WHERE status = 'dead';

-- One notification per INSERT statement and queue, not one per row: a batch of 10,000 jobs
-- wakes each idle consumer once. The channel is the schema-qualified table name.
CREATE OR REPLACE FUNCTION {notify_fn}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, q)
       FROM (SELECT DISTINCT queue AS q FROM new_rows) AS queues;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS jobs_notify ON {jobs};
CREATE TRIGGER jobs_notify AFTER INSERT ON {jobs}
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {notify_fn}();

-- migration: 2 transaction claim mode: attempt log
-- Attempts started in transaction mode and not yet folded into jobs.attempts. A job's own row
-- cannot record them: the transaction that runs the job holds it, and a crash rolls that
-- back. One short statement of its own counts each start here before the handler runs, so a
-- job that kills its process is still seen dying, and ends dead after max_attempts.
-- UNLOGGED: no WAL, so a count costs no disk flush; a server crash empties the table, which
-- at worst gives a job that was crashing its consumers some extra attempts. An entry is
-- deleted once its job settles (the delete may trail the job's commit by a moment, or be lost
-- with the consumer: a leftover entry of a done job is never read again).
CREATE UNLOGGED TABLE IF NOT EXISTS {attempts} (
    job_id  bigint  PRIMARY KEY,
    started integer NOT NULL
);

-- migration: 3 HOT updates for picks and heartbeats
-- An UPDATE that changes no indexed column, on a page with room for the new row version, is
-- HOT: no new index entries, and the old version is pruned with the page. Transaction mode's
-- pick (attempts, locked_until, locked_by) and lease mode's heartbeat (locked_until) change
-- only locked_until of the indexed columns, through the running-jobs index of migration 1.
-- Keyed on queue instead, that index still serves the rescue and the depth count (it holds only
-- running jobs, a few per worker), and those updates become HOT: measured on a 30,000-job
-- transaction-mode drain, 27,000 of the 30,000 picks. The fillfactor leaves each new page a
-- tenth free for them (pages already written keep theirs). Upgrading an existing table builds
-- the new index first, in one scan that lets reads through but holds writes (enqueues, claims,
-- acks) until the migration commits. Dropping the old index then needs the table to itself:
-- it waits for every open transaction on it, and a running transaction-mode job is one, so
-- upgrade with transaction-mode consumers stopped (docs/claim-modes.md says so too).
CREATE INDEX IF NOT EXISTS jobs_running_queue_idx ON {jobs} (queue) WHERE status = 'running';
DROP INDEX IF EXISTS {running_idx};
ALTER TABLE {jobs} SET (fillfactor = 90);

-- migration: 4 drop the attempt log
-- Transaction mode counts each start on the job's own row since picks became one statement per
-- batch (docs/claim-modes.md), so no statement reads or writes migration 2's table any more.
-- A transaction-mode consumer of a build older than that still writes it and would fail its
-- claims: stop those before upgrading (they must be stopped before migration 3 anyway).
DROP TABLE IF EXISTS {attempts};

-- migration: 5 lease mode: jobs rescued from a crash run alone
-- A lease that expires with its consumer's whole batch does not say which job killed the
-- process, so the rescue does not count that attempt against any of them; it marks them
-- isolate instead, and each is then claimed alone and run with nothing else in flight. A crash
-- during such a run is the job's own and counts (queries.sql: claim, rescue). The column's
-- default is a constant, so adding it rewrites no row. The partial index holds only the
-- pending isolated jobs, none in a run without crashes, so the claim's look at it first costs
-- an empty index probe; it is ordered as jobs_pending_idx, the order jobs are handed out in.
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS isolate boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS jobs_isolated_idx ON {jobs} (queue, run_at, id)
    WHERE status = 'pending' AND isolate;

-- migration: 6 unique keys
-- NewJob.key: while a job with a key is pending or running in its queue, an enqueue with the
-- same key inserts nothing and returns that job's id (queries.sql: enqueue_keyed). The unique
-- partial index makes that race-free across producers: a concurrent insert of the same key
-- waits for the first one's transaction and then skips. Jobs without a key (the usual case)
-- have no entry in it, so it costs their enqueues and settles nothing; picks and heartbeats
-- stay HOT (they change neither key nor status). Adding the column rewrites no row; building
-- the index scans the table once and holds writes meanwhile.
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS key text;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_key_idx ON {jobs} (queue, key)
    WHERE key IS NOT NULL AND status IN ('pending', 'running');

-- migration: 7 queues: pause and resume
-- One row per queue that was ever paused; paused_at is set while it is paused (`jobq pause`,
-- cleared by `jobq resume`; queries.sql: pause, resume). Every consumer reads its queue's row
-- about every second (queries.sql: paused): a primary-key probe of a table of a few rows. The
-- claim does not look at it: the pool stops asking for work instead (docs/architecture.md,
-- "Pause and resume"), so pausing costs the claim nothing.
CREATE TABLE IF NOT EXISTS {queues} (
    queue     text PRIMARY KEY,
    paused_at timestamptz
);

-- migration: 8 retention: finished jobs by age
-- postgres.retention and `jobq prune` delete done and dead rows older than their retention, a
-- batch at a time (queries.sql: prune). This index finds them oldest first in one range scan
-- per queue and state, however many rows are younger or belong to other queues; without it
-- every prune round would read the whole table. Every done or dead row gets an entry (an ack
-- already writes new index entries, since it changes status, which the partial indexes name),
-- whether or not retention is set: 8 to 31 bytes a row measured (the rows of one ack flush share
-- a finished_at, which B-tree deduplication stores once). Building it on an existing table
-- scans the table once and holds writes (enqueues, claims, acks) until the migration commits.
CREATE INDEX IF NOT EXISTS jobs_finished_idx ON {jobs} (queue, status, finished_at)
    WHERE status IN ('done', 'dead');

-- migration: 9 periodic schedules
-- The last tick each schedule (config `schedules:`) fired, per queue. A consumer fires a tick
-- in one transaction: lock the row (SKIP LOCKED: another process is firing it), check that
-- the tick is later than last_tick, enqueue the job, move last_tick. So a tick enqueues
-- exactly once however many consumers run it (queries.sql: schedule_*; ticks.py).
CREATE TABLE IF NOT EXISTS {schedules} (
    queue     text        NOT NULL,
    name      text        NOT NULL,
    last_tick timestamptz NOT NULL,
    PRIMARY KEY (queue, name)
);

-- migration: 10 job control: cancelled jobs
-- `jobq jobs cancel` (admin.py; docs/architecture.md, "Job control"). A job that is not running
-- is cancelled in place: status 'cancelled', finished_at set, and no claim takes it again. A
-- running one cannot be written by the command (in transaction mode its own transaction holds
-- its row), so the request waits in {cancels}: each consumer asks about once a second whether
-- a job it runs is there (queries.sql: cancels_held), cancels that handler and settles the job
-- as cancelled, deleting the request in the same statement. The CHECK is replaced NOT VALID:
-- the new one only widens the old one, which every row passes, so no row is read. Replacing it
-- needs the table to itself for an instant, so it waits for every open transaction on the
-- table, and a running transaction-mode job is one (while every later statement on the table
-- waits behind it): upgrade with transaction-mode consumers stopped, as for migration 3.
-- Cancelled rows are not pruned by postgres.retention (its index holds done and dead rows);
-- they are an operator's few.
ALTER TABLE {jobs} DROP CONSTRAINT IF EXISTS jobs_status_check;
ALTER TABLE {jobs} ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'running', 'done', 'dead', 'cancelled')) NOT VALID;
CREATE TABLE IF NOT EXISTS {cancels} (
    job_id       bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now()
);

-- migration: 11 priorities
-- NewJob.priority, 0 (the default) to 9 (checked by jobq at enqueue; a row another client
-- inserts with another value is handed out as priority 0 when below 1). The claims look first
-- at the due jobs of priority 1 and up, through this partial index, in its order (highest
-- first, then due time), and only when there are none at the rest (queries.sql: claim,
-- txn_pick). It holds only pending jobs with a priority, none in a queue that uses none, so the
-- claim's look at it costs an empty index probe there, as the isolated jobs' does. Adding the
-- column rewrites no row (a constant default); the index build scans the table once and holds
-- writes meanwhile.
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS jobs_priority_idx ON {jobs} (queue, priority DESC, run_at, id)
    WHERE status = 'pending' AND priority > 0;

-- migration: 12 each failed attempt's error
-- A JSON array of the latest attempts' errors (attempt, at, type, message, traceback; see
-- core/attempts.py), appended by the retry, dead and txn_fail statements when an attempt
-- raised, shown by `jobq jobs show` and the dashboard. NULL until the first failure, so a job
-- that never fails stores nothing and its ack writes nothing more; no claim reads it. Adding a
-- column without a default rewrites no row.
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS errors jsonb;

-- migration: 13 rules for foreign writers
-- docs/wire-format.md invites any SQL client to insert jobs. The column types admit values jobq
-- cannot give a meaning to, and some of them stopped more than their own job: a time Python
-- cannot hold ('infinity', before year 1, after 9999) failed the loading of a whole claim's
-- rows after it committed (the batch stranded running until its lease expired, again and
-- again) and every `jobq jobs list` and `jobq stats` of the queue; attempts at the integer's top
-- overflowed the claim's count, so no claim of the queue went through; a running row without a
-- lease was never rescued. These CHECKs refuse such values at the INSERT (or UPDATE), naming
-- the rule; docs/wire-format.md lists them, and the meaning of every value they let through.
--   jobs_times_check: every time finite, from 0001-01-02 to 9999-12-30 (UTC): what Python's
--     datetime holds, with a day's margin for any session time zone.
--   jobs_attempts_check: attempts >= 0 (the attempts used; max_attempts >= 1 since migration 1).
--   jobs_priority_check: priority from 0 to 9 (NewJob.priority; the claims' order).
--   jobs_runnable_check: a pending or running job has a kind of 1 to 200 characters, and a
--     payload and headers that are JSON objects (what the consumer would dead-letter unrun;
--     finished rows may keep anything, as records).
--   jobs_lease_check: a running row has a lease (locked_until), or no rescue would ever free it.
-- Rows already there that break a rule are mended first, keeping their meaning where they have
-- one: times are clamped into the range (run_at 'infinity', never due, becomes 9999-12-30, still
-- never due; '-infinity', due, becomes 0001-01-02, still due), negative attempts become 0,
-- priorities are clamped to 0-9, a running row without a lease gets one that has expired (the
-- next rescue frees it), and a pending or running job that could never run is made dead with
-- the reason, as a consumer would have (`jobq dead list` shows it; `jobq dead purge` removes
-- it; `jobq dead requeue` leaves it dead, since the rule would refuse it as pending). So every
-- CHECK is added valid, in one scan each; with the mending, the migration reads the table a few
-- times and holds writes until it commits: on a large table, run it at a quiet moment, with
-- transaction-mode consumers stopped (as migration 3: the constraints need the table to
-- themselves for an instant). The status CHECK of migration 10, added NOT VALID, is validated
-- too (every row passes it: migration 1's narrower one held before).
UPDATE {jobs}
   SET created_at = least(greatest(created_at, '0001-01-02 00:00:00+00'), '9999-12-30 00:00:00+00')
 WHERE created_at NOT BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00';
UPDATE {jobs}
   SET run_at = least(greatest(run_at, '0001-01-02 00:00:00+00'), '9999-12-30 00:00:00+00')
 WHERE run_at NOT BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00';
UPDATE {jobs}
   SET locked_until = least(greatest(locked_until, '0001-01-02 00:00:00+00'),
                            '9999-12-30 00:00:00+00')
 WHERE locked_until NOT BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00';
UPDATE {jobs}
   SET finished_at = least(greatest(finished_at, '0001-01-02 00:00:00+00'),
                           '9999-12-30 00:00:00+00')
 WHERE finished_at NOT BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00';
UPDATE {jobs} SET attempts = 0 WHERE attempts < 0;
UPDATE {jobs} SET priority = least(greatest(priority, 0), 9) WHERE priority NOT BETWEEN 0 AND 9;
UPDATE {jobs} SET locked_until = now() WHERE status = 'running' AND locked_until IS NULL;
UPDATE {jobs}
   SET status = 'dead', finished_at = now(), locked_until = NULL, locked_by = NULL,
       last_error = 'MalformedJob: ' || CASE
           WHEN length(kind) = 0 THEN 'kind is empty'
           WHEN length(kind) > 200 THEN 'kind is longer than 200 characters'
           WHEN jsonb_typeof(payload) <> 'object' THEN
               'payload is not a JSON object (got ' || jsonb_typeof(payload) || ')'
           ELSE 'headers are not a JSON object (got ' || jsonb_typeof(headers) || ')'
       END || ' (made dead by jobq init, migration 13: the schema refuses it now)'
 WHERE status IN ('pending', 'running')
   AND NOT (length(kind) BETWEEN 1 AND 200 AND jsonb_typeof(payload) = 'object'
            AND jsonb_typeof(headers) = 'object');
ALTER TABLE {jobs} ADD CONSTRAINT jobs_times_check CHECK (
    created_at BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'
    AND run_at BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'
    AND (locked_until IS NULL
         OR locked_until BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00')
    AND (finished_at IS NULL
         OR finished_at BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'));
ALTER TABLE {jobs} ADD CONSTRAINT jobs_attempts_check CHECK (attempts >= 0);
ALTER TABLE {jobs} ADD CONSTRAINT jobs_priority_check CHECK (priority BETWEEN 0 AND 9);
ALTER TABLE {jobs} ADD CONSTRAINT jobs_runnable_check CHECK (
    status NOT IN ('pending', 'running')
    OR (length(kind) BETWEEN 1 AND 200 AND jsonb_typeof(payload) = 'object'
        AND jsonb_typeof(headers) = 'object'));
ALTER TABLE {jobs} ADD CONSTRAINT jobs_lease_check CHECK (
    status <> 'running' OR locked_until IS NOT NULL);
ALTER TABLE {jobs} VALIDATE CONSTRAINT jobs_status_check;
