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
