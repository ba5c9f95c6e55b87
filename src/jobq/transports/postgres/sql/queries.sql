-- Every SQL statement jobq runs against PostgreSQL, as named blocks.
-- A block starts with "-- name: <name>"; the comment lines after it say why it is written so.
-- {jobs} is the schema-qualified table (psycopg.sql.Identifier); values are always parameters.

-- name: claim
-- Lease mode: claim up to %(limit)s eligible jobs in one statement and commit at once.
-- CTE "lone" looks first for a due job rescued from a crash (isolate, see rescue) and takes
-- only that one, when %(lone)s: the consumer holds no other (lease_state.py), so a crash
-- while it holds one is that suspect's, whatever else it runs beside it (see rescue). It walks
-- jobs_isolated_idx, which is empty unless consumers crashed, so in a run without crashes it
-- costs one empty index probe, no second round trip.
-- CTE "urgent" runs only when "lone" found nothing: the due jobs with a priority (migration 11),
-- highest first, through jobs_priority_idx, empty in a queue that uses none (one empty index
-- probe). A claim that takes some takes only those: the pool asks again for the rest.
-- CTE "batch" runs only when neither found anything: it walks jobs_pending_idx in hand-out order
-- (claim_after, the same statement, starts the walk past the consumer's last claimed job:
-- postgres/cursor.py),
-- leaves the isolated jobs to "lone", and skips rows another consumer is claiming right now
-- (SKIP LOCKED), so concurrent consumers never wait on each other.
-- The UPDATE counts the attempt at claim time (a rescue refunds it when the crash cannot be
-- blamed on the job, see rescue), short of the integer's top (attempts another writer set
-- there); RETURNING gives the attempts used before it too: a job that had used up its
-- attempts (another writer's, or an operator's, doing) is dead-lettered unrun (decode.spent). locked_by is this claim's token, "<consumer>/<claim number>":
-- every later write of the job (ack, retry, dead, release, heartbeat) matches it, so a
-- delivery whose lease expired can never settle a newer claim of the same job.
-- payload and headers come back as JSON text: jobq checks their size before parsing them, and a
-- value Python cannot parse becomes a dead-letter reason instead of an error mid-claim.
-- CTE "async_commit" makes this one statement's commit skip the wait for the WAL flush
-- (SET LOCAL, the session keeps its setting): the claim returns ~0.1 ms after the UPDATE
-- instead of after an fsync (0.2-25 ms here). If the server crashes before the flush, the
-- claim is undone and the jobs are pending again: they are handed out again, never lost,
-- which at-least-once delivery allows. With postgres.async_commit false, {commit} is the
-- session's own synchronous_commit instead of 'off' (sql/__init__.py), and the claim and the
-- ack wait for the flush as every other commit does.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', {commit}, true)
),
lone AS (
    SELECT id, attempts
      FROM {jobs}
     WHERE queue = %(queue)s AND status = 'pending' AND isolate AND run_at <= now()
       AND %(lone)s
     ORDER BY run_at, id
     LIMIT 1
       FOR UPDATE SKIP LOCKED
),
urgent AS (
    SELECT id, attempts
      FROM {jobs}
     WHERE queue = %(queue)s AND status = 'pending' AND priority > 0 AND NOT isolate
       AND run_at <= now() AND NOT EXISTS (SELECT FROM lone)
     ORDER BY priority DESC, run_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT id, attempts
      FROM {jobs}
     WHERE queue = %(queue)s AND status = 'pending' AND NOT isolate AND run_at <= now()
       AND NOT EXISTS (SELECT FROM lone) AND NOT EXISTS (SELECT FROM urgent) {after}
     ORDER BY run_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT id, attempts FROM lone
    UNION ALL
    SELECT id, attempts FROM urgent
    UNION ALL
    SELECT id, attempts FROM batch
)
UPDATE {jobs} AS j
   SET status = 'running',
       attempts = j.attempts + (j.attempts < 2147483647)::int,
       locked_until = now() + make_interval(secs => %(lease)s),
       locked_by = %(token)s
  FROM picked, async_commit
 WHERE j.id = picked.id
RETURNING j.id, j.kind, j.payload::text, j.headers::text, j.attempts, j.max_attempts, j.created_at,
          j.isolate, j.run_at, j.priority, picked.attempts;

-- name: next_due
-- Seconds until the queue's next pending job is due (NULL when none is), asked by a consumer
-- whose claim came back empty (idle.py): one probe of jobs_pending_idx. Only jobs due from
-- 100 ms ago on: an older one that the claim did not get is held by someone (in transaction
-- mode a running job stays pending, its run_at in the past) and must not hide the next.
SELECT extract(epoch FROM min(run_at) - now())::float8
  FROM {jobs}
 WHERE queue = %(queue)s AND status = 'pending'
   AND run_at > now() - interval '100 milliseconds';

-- name: ack
-- Batched acks: one statement for every job that succeeded since the last flush.
-- Asynchronous commit (see claim): an ack undone by a server crash leaves the job running
-- until its lease expires and it runs again, as an ack lost in a consumer crash does.
-- Only jobs still held by the claim each ack comes from (the pairs of %(ids)s and %(tokens)s
-- against locked_by, the claim's token): a job whose lease expired was rescued and may be
-- running in another consumer now, or again in this one under a newer claim; its outcome is
-- that claim's to write. So are retry's, dead's and release's. RETURNING tells which were
-- still held. The pairs arrive as two comma-separated texts (held.pairs says why), split here.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', {commit}, true)
)
UPDATE {jobs} AS j
   SET status = 'done', finished_at = now(), locked_until = NULL
  FROM async_commit, unnest(string_to_array(%(ids)s, ',')::bigint[], string_to_array(%(tokens)s, ',')) AS t(id, token)
 WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = t.token
RETURNING j.id, j.locked_by;

-- name: retry
-- Back to pending, not eligible before run_at; the attempt was counted at claim. Only by the
-- claim that holds the job (token: see ack). An isolated job stays isolated until it ends.
-- A job an operator asked to cancel (migration 10) that failed before its consumer saw the
-- request ends cancelled instead: never retried. The request stays for `jobq jobs cancel` to
-- clear (cancels_stale). The attempt's error, if it raised one, joins the job's history
-- (migration 12): the latest 10 kept, core/attempts.py's ERRORS_KEPT (so dead and txn_fail).
UPDATE {jobs}
   SET status = CASE WHEN EXISTS (SELECT FROM {cancels} WHERE job_id = %(id)s)
                     THEN 'cancelled' ELSE 'pending' END,
       finished_at = CASE WHEN EXISTS (SELECT FROM {cancels} WHERE job_id = %(id)s)
                          THEN now() END,
       run_at = now() + make_interval(secs => %(delay)s),
       last_error = %(reason)s,
       errors = CASE WHEN %(error)s::jsonb IS NULL THEN errors
                     ELSE jsonb_path_query_array(coalesce(errors, '[]') || %(error)s::jsonb,
                                                 '$[last - 9 to last]') END,
       locked_until = NULL,
       locked_by = NULL
 WHERE id = %(id)s AND status = 'running' AND locked_by = %(token)s
RETURNING id;

-- name: dead
-- Parked for good; last_error says why. `jobq dead requeue` brings it back. Only by the
-- claim that holds the job (token: see ack). A job with a cancel request ends cancelled
-- instead (see retry): a requeue must not bring back a request that outlived its run.
UPDATE {jobs}
   SET status = CASE WHEN EXISTS (SELECT FROM {cancels} WHERE job_id = %(id)s)
                     THEN 'cancelled' ELSE 'dead' END,
       last_error = %(reason)s, finished_at = now(),
       errors = CASE WHEN %(error)s::jsonb IS NULL THEN errors
                     ELSE jsonb_path_query_array(coalesce(errors, '[]') || %(error)s::jsonb,
                                                 '$[last - 9 to last]') END,
       locked_until = NULL, locked_by = NULL
 WHERE id = %(id)s AND status = 'running' AND locked_by = %(token)s
RETURNING id;

-- name: release
-- Received but never started (graceful shutdown): back to pending at once, attempt not counted,
-- and wake the other consumers so they take it now rather than at their next poll. Only jobs
-- still held by the claim each comes from (token pairs: see ack). One with a cancel request
-- (migration 10) ends cancelled instead, unrun.
WITH released AS (
    UPDATE {jobs} AS j
       SET status = CASE WHEN EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
                         THEN 'cancelled' ELSE 'pending' END,
           finished_at = CASE WHEN EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
                              THEN now() END,
           attempts = greatest(j.attempts - 1, 0),
           locked_until = NULL, locked_by = NULL
      FROM unnest(string_to_array(%(ids)s, ',')::bigint[], string_to_array(%(tokens)s, ',')) AS t(id, token)
     WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = t.token
    RETURNING j.queue
)
SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM released) AS q;

-- name: heartbeat
-- Extend the lease of every job this consumer holds (buffered, running or awaiting its ack
-- flush), so long jobs are not rescued from under a live consumer. Only jobs still held by the
-- claim each comes from (token pairs: see ack); RETURNING tells which, and the consumer drops
-- the others: their leases expired and were rescued, so it must stop renewing and settling them.
-- It changes locked_until only, no indexed column: a HOT update (migration 3).
UPDATE {jobs} AS j
   SET locked_until = now() + make_interval(secs => %(lease)s)
  FROM unnest(string_to_array(%(ids)s, ',')::bigint[], string_to_array(%(tokens)s, ',')) AS t(id, token)
 WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = t.token
RETURNING j.id, j.locked_by;

-- name: rescue
-- Any consumer frees leases that expired (their consumer died or stalled). Who is to blame?
-- An expired job whose consumer held others too (CTE "held": per consumer, its jobs still
-- running in the queue, the expired ones included) may never have started: the one that
-- killed the process could be any of them. Its attempt is refunded and it is marked isolate,
-- a suspect, claimed alone next (see claim). The crash is charged to a job, its attempt
-- counted, if it was the only job its consumer held, or if it is the suspect its consumer
-- held (isolate, from that consumer's latest claim of a suspect: a consumer holds one at a
-- time, and an earlier one had settled, its ack not yet flushed), whatever ran beside it.
-- Once its attempts are used up it is dead. So a job that kills its process every time runs
-- once in its batch and then max_attempts times as its consumer's suspect, and its
-- batch-mates spend no attempt on it. A suspect is charged for a crash that a job beside it
-- caused only if that job was never suspected before (a suspect is never claimed into a
-- batch): once at most per such job, which then becomes a suspect itself. locked_by is "<consumer>/<claim number>" (see claim); a token of another form
-- counts as a consumer with no claim number. A job an operator asked to cancel (migration 10)
-- ends cancelled instead of running again.
WITH expired AS (
    SELECT id, locked_by, isolate
      FROM {jobs}
     WHERE status = 'running' AND locked_until < now() AND queue = %(queue)s
     LIMIT 1000
       FOR UPDATE SKIP LOCKED
),
held AS (
    SELECT split_part(locked_by, '/', 1) AS consumer, count(*) AS n,
           max(substring(locked_by FROM '/([0-9]+)$')::bigint) FILTER (WHERE isolate) AS latest
      FROM {jobs}
     WHERE status = 'running' AND queue = %(queue)s
       AND split_part(locked_by, '/', 1) IN (SELECT split_part(locked_by, '/', 1) FROM expired)
     GROUP BY 1
),
verdict AS (
    SELECT e.id, split_part(coalesce(e.locked_by, '?'), '/', 1) AS consumer,
           coalesce(h.n, 1) AS n,
           coalesce(h.n, 1) = 1
           OR coalesce(e.isolate
                       AND substring(e.locked_by FROM '/([0-9]+)$')::bigint = h.latest, false)
           AS own,
           EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = e.id) AS cancelled
      FROM expired AS e
      LEFT JOIN held AS h ON h.consumer = split_part(e.locked_by, '/', 1)
)
UPDATE {jobs} AS j
   SET status = CASE WHEN v.cancelled THEN 'cancelled'
                     WHEN v.own AND j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
       finished_at = CASE WHEN v.cancelled OR (v.own AND j.attempts >= j.max_attempts)
                          THEN now() END,
       attempts = CASE WHEN v.own THEN j.attempts ELSE greatest(j.attempts - 1, 0) END,
       isolate = true,
       last_error = CASE
           WHEN v.cancelled THEN
               'cancelled by an operator (jobq jobs cancel); its lease expired (consumer '
               || v.consumer || ' died or stalled) before it stopped'
           WHEN v.own AND j.attempts >= j.max_attempts THEN
               'lease expired on attempt ' || j.attempts || ' of ' || j.max_attempts
               || ': the job killed or stalled its consumer on each of its attempts run alone'
               || ' (last: consumer ' || v.consumer || ' died or stalled)'
           WHEN v.own THEN
               'lease expired on attempt ' || j.attempts || ' of ' || j.max_attempts
               || ' (consumer ' || v.consumer || ' died or stalled while it ran alone: counted)'
           ELSE
               'lease expired (consumer ' || v.consumer || ' died or stalled holding ' || v.n
               || ' jobs): attempt not counted, it runs alone next'
       END,
       run_at = now(),
       locked_until = NULL,
       locked_by = NULL
  FROM verdict AS v
 WHERE j.id = v.id
RETURNING j.id, j.status;

-- Transaction mode (transports/postgres/transaction.py): each worker runs its job inside the
-- transaction that locked the job's row; the job's own writes commit with its status.
-- Per batch of free workers: one txn_pick. Per job: txn_begin, txn_take and txn_savepoint
-- (one round trip, see claims.py), the handler, then COMMIT (or txn_undo, txn_fail, COMMIT);
-- a job picked ahead is taken in the round trip of the COMMIT that frees its worker.

-- name: txn_pick
-- Pick up to %(limit)s jobs and mark them picked, committed at once. The jobs stay pending;
-- locked_until marks them picked for a moment (%(grace)s s), ample for txn_take to lock each
-- in its own transaction, and other picks pass them over meanwhile. After that moment a job
-- is free again even if its take never came (the consumer died in between, or its event loop
-- was blocked that long).
-- Starts are counted in the job's own transaction (txn_take), so a consumer that dies costs
-- the jobs it held, fresh, no attempt: its transactions roll back, count included. Such a job
-- comes back pending with its pick's mark still set (locked_until, stale: a failure or a
-- hand-back clears it, and a done job is never picked), and its start is counted here,
-- committed: a job that kills its process every time still uses up its attempts and ends dead
-- (txn_bury) instead of looping, after one uncounted death (the first, which cannot be told
-- from its neighbours', as in lease mode's rescue).
-- RETURNING stale says which were counted here: the take counts the others. Such a job is
-- marked isolate, as lease mode's rescue marks the jobs of a consumer that died: isolate
-- (returned) is its Job.redelivered, for as long as the job lives.
-- A pending row's locked_until further ahead than a pick's moment is no pick's (jobq writes
-- none such; another writer may have): the job is picked as if it were NULL, and no start
-- is counted for it. A count stops short of the integer's top, as the claim's.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
urgent AS (
    SELECT id, run_at, priority, coalesce(locked_until <= now(), false) AS stale
      FROM {jobs}
     WHERE queue = %(queue)s AND status = 'pending' AND priority > 0
       AND run_at <= coalesce(%(until)s, now())
       AND (locked_until IS NULL OR locked_until <= now()
            OR locked_until > now() + make_interval(secs => 2 * %(grace)s))
     ORDER BY priority DESC, run_at, id
     LIMIT %(limit)s
       FOR NO KEY UPDATE SKIP LOCKED
),
next AS (
    SELECT id, run_at, 0 AS priority, coalesce(locked_until <= now(), false) AS stale
      FROM {jobs}
     WHERE queue = %(queue)s AND status = 'pending'
       AND (run_at, id) > (%(after_run_at)s, %(after_id)s)
       AND run_at <= coalesce(%(until)s, now())
       AND (locked_until IS NULL OR locked_until <= now()
            OR locked_until > now() + make_interval(secs => 2 * %(grace)s))
       AND NOT EXISTS (SELECT FROM urgent)
     ORDER BY run_at, id
     LIMIT %(limit)s
       FOR NO KEY UPDATE SKIP LOCKED
),
picked AS (
    SELECT * FROM urgent
    UNION ALL
    SELECT * FROM next
)
UPDATE {jobs} AS j
   SET attempts = j.attempts + (picked.stale AND j.attempts < 2147483647)::int,
       isolate = j.isolate OR picked.stale,
       locked_until = now() + make_interval(secs => %(grace)s),
       locked_by = %(worker)s
  FROM picked, async_commit
 WHERE j.id = picked.id
RETURNING j.id, j.kind, j.payload::text, j.headers::text, j.attempts, j.max_attempts,
          j.created_at, j.locked_until, picked.stale, j.isolate, picked.priority, picked.run_at;

-- name: txn_begin
-- READ COMMITTED whatever the server default: txn_take must see what txn_pick committed.
BEGIN ISOLATION LEVEL READ COMMITTED;

-- name: txn_take
-- In the job's transaction: lock a job txn_pick picked, until the transaction ends, and mark
-- it done already: only this transaction sees that until it commits, and it commits that way
-- only if the handler succeeds (else txn_fail overwrites it), so success costs a bare COMMIT
-- and no further statement. Hence finished_at is when the job began; it became visible, with
-- its effects, at the COMMIT that ended it. The job must still be as its pick left it
-- (locked_by and locked_until, the pick's token): if the pick's moment passed and another
-- pick took the job since, this matches no row and never waits on that pick's take; the
-- caller rolls back and moves on. Not SKIP LOCKED: a concurrent pick may hold the row for an
-- instant (FOR UPDATE keeps the lock on a row it then finds picked already), and that must
-- not make this miss it. %(count)s is 1 where the pick did not count the start (see txn_pick):
-- counted here, it commits with the job's outcome and rolls back with a crash. locked_until
-- stays: a done row is never picked, and txn_fail_apart knows the attempt's row by it (a
-- failure, txn_fail, clears it, so a retried job is not taken for an abandoned one).
UPDATE {jobs}
   SET status = 'done', finished_at = now(),
       attempts = attempts + (attempts < 2147483647)::int * %(count)s
 WHERE id = %(id)s AND status = 'pending' AND locked_by = %(worker)s
   AND locked_until = %(until)s;

-- name: txn_unpick
-- Jobs picked or taken and then handed back unstarted (graceful shutdown, a take that failed,
-- picked ahead and not asked for), after ROLLBACK: free for other consumers at once, their
-- starts uncounted (%(counted)s: those whose pick counted theirs, see txn_pick).
-- One with a cancel request (migration 10) ends cancelled, unrun.
UPDATE {jobs} AS j
   SET attempts = j.attempts - (j.id = ANY(%(counted)s))::int, locked_until = NULL,
       status = CASE WHEN EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
                     THEN 'cancelled' ELSE 'pending' END,
       finished_at = CASE WHEN EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
                          THEN now() END
 WHERE j.id = ANY(%(ids)s) AND j.status = 'pending' AND j.locked_by = %(worker)s
   AND j.locked_until IS NOT NULL;

-- name: txn_savepoint
-- Sent with the take: what the handler writes comes after it, so a failure can undo just
-- that (txn_undo) and record itself while the job's row stays locked.
SAVEPOINT jobq_job;

-- name: txn_undo
ROLLBACK TO SAVEPOINT jobq_job;

-- name: txn_fail
-- After txn_undo, in the job's transaction, before COMMIT: retry at run_at, or dead (the
-- attempt was counted by txn_pick or txn_take, both before the savepoint). The row never left
-- this transaction's lock, so no other claim could take the job between the failure and this
-- record of it. clock_timestamp(), not
-- now(): now() is when the transaction, and so the job, began; the delay runs from the failure.
-- Status 'cancelled' (the operator's request, cancels_held, seen by the consumer) deletes the
-- request with it; a retry of a job whose cancel was requested meanwhile ends cancelled too
-- (see retry).
WITH request AS (
    DELETE FROM {cancels} WHERE job_id = %(id)s AND %(status)s::text = 'cancelled'
),
final AS (
    SELECT CASE WHEN %(status)s::text IN ('pending', 'dead')
                     AND EXISTS (SELECT FROM {cancels} WHERE job_id = %(id)s)
                THEN 'cancelled' ELSE %(status)s::text END AS status
)
UPDATE {jobs} AS j
   SET status = final.status,
       run_at = clock_timestamp() + make_interval(secs => %(delay)s),
       last_error = %(reason)s, locked_until = NULL,
       errors = CASE WHEN %(error)s::jsonb IS NULL THEN j.errors
                     ELSE jsonb_path_query_array(coalesce(j.errors, '[]') || %(error)s::jsonb,
                                                 '$[last - 9 to last]') END,
       finished_at = CASE WHEN final.status IN ('dead', 'cancelled') THEN clock_timestamp() END
  FROM final
 WHERE j.id = %(id)s;

-- name: txn_commit
COMMIT;

-- name: txn_fail_apart
-- The failure of a job whose transaction ended without jobq: the handler ended it (a COMMIT or
-- ROLLBACK statement through job.context), or its COMMIT failed (a deferred constraint, the
-- session ended by idle_in_transaction_session_timeout). Recorded as txn_fail would, in a
-- transaction of its own (autocommit), and only on the row as this attempt left it: its
-- pick's token (locked_by and locked_until, which the take keeps and any pick since, of this
-- consumer too, replaces), in one of %(states)s: 'pending' where the job's transaction rolled
-- back, 'done' too where the handler may have committed it, for failed work must not stay
-- done. A COMMIT that failed with the link lost may have gone through: that row is done, and
-- stays done. A cancel as in txn_fail.
WITH request AS (
    DELETE FROM {cancels} WHERE job_id = %(id)s AND %(status)s::text = 'cancelled'
),
final AS (
    SELECT CASE WHEN %(status)s::text IN ('pending', 'dead')
                     AND EXISTS (SELECT FROM {cancels} WHERE job_id = %(id)s)
                THEN 'cancelled' ELSE %(status)s::text END AS status
)
UPDATE {jobs} AS j
   SET status = final.status,
       run_at = clock_timestamp() + make_interval(secs => %(delay)s),
       last_error = %(reason)s,
       errors = CASE WHEN %(error)s::jsonb IS NULL THEN j.errors
                     ELSE jsonb_path_query_array(coalesce(j.errors, '[]') || %(error)s::jsonb,
                                                 '$[last - 9 to last]') END,
       locked_until = NULL, attempts = %(attempt)s,
       finished_at = CASE WHEN final.status IN ('dead', 'cancelled') THEN clock_timestamp() END
  FROM final
 WHERE j.id = %(id)s AND j.locked_by = %(worker)s AND j.locked_until = %(until)s
   AND j.status = ANY(%(states)s::text[]);

-- name: txn_bury
-- In the transaction of a take whose pick found every attempt already used by consumers
-- that died mid-job (their transactions rolled back; only the picks' counts stayed): dead,
-- unrun, with the attempts they used (this pick's start does not count), for the reason the
-- pool decided.
UPDATE {jobs}
   SET status = 'dead', finished_at = now(), attempts = %(attempts)s::int, locked_until = NULL,
       last_error = %(reason)s
 WHERE id = %(id)s;

-- name: txn_sweep_start
-- A --once sweep takes the jobs due by the server's clock when it begins (see txn_pick).
SELECT now();

-- name: enqueue
-- One INSERT for a whole batch (arrays unnested server-side): one round trip and, through the
-- statement-level trigger, one NOTIFY however many rows. Run inside a transaction whose id it
-- returns: if the COMMIT's answer is lost, xact_status tells whether the jobs went in.
INSERT INTO {jobs} (queue, kind, payload, headers, max_attempts, run_at, priority)
SELECT %(queue)s, t.kind, t.payload::jsonb, t.headers::jsonb, t.max_attempts,
       now() + make_interval(secs => t.delay), t.priority
  FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(headers)s::text[],
              %(max_attempts)s::int[], %(delays)s::float8[], %(priorities)s::smallint[])
       AS t(kind, payload, headers, max_attempts, delay, priority)
RETURNING id, pg_current_xact_id()::text;

-- name: enqueue_keyed
-- enqueue for a batch holding unique keys (migration 6): a job whose key is pending or running
-- in the queue (or earlier in the same batch) is not inserted. RETURNING gives the inserted
-- rows' keys, so the caller tells which were skipped and looks their ids up (keyed_ids).
-- Keys go in sorted, so two producers inserting the same keys lock them in the same order
-- (no deadlock); rows without a key keep their order among themselves, after the keyed ones.
INSERT INTO {jobs} (queue, kind, payload, headers, max_attempts, run_at, key, priority)
SELECT %(queue)s, t.kind, t.payload::jsonb, t.headers::jsonb, t.max_attempts,
       now() + make_interval(secs => t.delay), t.key, t.priority
  FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(headers)s::text[],
              %(max_attempts)s::int[], %(delays)s::float8[], %(keys)s::text[],
              %(priorities)s::smallint[]) WITH ORDINALITY
       AS t(kind, payload, headers, max_attempts, delay, key, priority, ord)
 ORDER BY t.key NULLS LAST, t.ord
    ON CONFLICT (queue, key) WHERE key IS NOT NULL AND status IN ('pending', 'running')
    DO NOTHING
RETURNING id, pg_current_xact_id()::text, key;

-- name: keyed_ids
-- The jobs holding these keys in the queue: looked up before the insert (a transaction-mode job
-- running right now is still pending to others, and an insert of its key would wait for its
-- transaction, the whole run), and after it for the keys the insert skipped.
SELECT key, id FROM {jobs}
 WHERE queue = %(queue)s AND key = ANY(%(keys)s::text[]) AND status IN ('pending', 'running');

-- name: xact_status
-- After a COMMIT whose answer was lost: 'committed', 'aborted', 'in progress' (the server has
-- not yet noticed the broken connection) or NULL (too old to know).
SELECT pg_xact_status(%(xid)s::xid8);

-- name: depth
-- Jobs by state for `jobq stats` and the depth gauge, polled every few seconds by each consumer,
-- so it must stay cheap however many jobs are done: one aggregate per state, each answered
-- from that state's partial index (done rows, the bulk of the table, are never counted).
-- "oldest" is how long the longest-waiting due job has waited since it was due (run_at): a
-- delayed job is not waiting yet, and a latency alert on the gauge must not fire on a queue
-- that holds only those (it was now() - min(created_at) over every pending job).
SELECT 'pending' AS status, count(*) AS n,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())) AS oldest
  FROM {jobs} WHERE queue = %(queue)s AND status = 'pending'
UNION ALL
SELECT 'running', count(*), NULL FROM {jobs} WHERE queue = %(queue)s AND status = 'running'
UNION ALL
SELECT 'dead', count(*), NULL FROM {jobs} WHERE queue = %(queue)s AND status = 'dead';

-- name: queue_names
-- Every queue with a job in the table or a row in the queues table (the dashboard lists them).
-- A skip scan, one index probe per queue and per state group, each on the partial index that
-- holds that group with queue leading (pending, running, done and dead; cancelled rows have
-- none, so a queue holding only cancelled jobs is not found): a table of millions of done
-- jobs costs a few dozen probes, not a scan. At most 500.
WITH RECURSIVE pending(q) AS (
    SELECT min(queue) FROM {jobs} WHERE status = 'pending'
    UNION ALL
    SELECT (SELECT min(queue) FROM {jobs} WHERE status = 'pending' AND queue > p.q)
      FROM pending AS p WHERE p.q IS NOT NULL
), running(q) AS (
    SELECT min(queue) FROM {jobs} WHERE status = 'running'
    UNION ALL
    SELECT (SELECT min(queue) FROM {jobs} WHERE status = 'running' AND queue > r.q)
      FROM running AS r WHERE r.q IS NOT NULL
), finished(q) AS (
    SELECT min(queue) FROM {jobs} WHERE status IN ('done', 'dead')
    UNION ALL
    SELECT (SELECT min(queue) FROM {jobs} WHERE status IN ('done', 'dead') AND queue > f.q)
      FROM finished AS f WHERE f.q IS NOT NULL
)
SELECT q FROM pending WHERE q IS NOT NULL
UNION SELECT q FROM running WHERE q IS NOT NULL
UNION SELECT q FROM finished WHERE q IS NOT NULL
UNION SELECT queue FROM {queues}
ORDER BY 1 LIMIT 500;

-- name: paused
-- Whether the queue is paused (a row with paused_at set) and since when. Every consumer asks
-- about every second and `jobq stats` once: a primary-key probe (migration 7).
SELECT paused_at FROM {queues} WHERE queue = %(queue)s;

-- name: pause
-- `jobq pause`: paused from now, unless it already is. No row back means it already was (the
-- update's WHERE, checked on the row's latest version, keeps the first pause's time); the
-- caller then reads since when.
INSERT INTO {queues} AS q (queue, paused_at) VALUES (%(queue)s, now())
    ON CONFLICT (queue) DO UPDATE SET paused_at = now() WHERE q.paused_at IS NULL
RETURNING paused_at;

-- name: resume
-- `jobq resume`: the time of the pause it ended; no row back means the queue was not paused.
-- FOR UPDATE: of two resumes at once, the second waits for the first, finds paused_at NULL on
-- the row's latest version, and changes nothing. The row stays (paused_at NULL): it is the
-- queue's.
WITH ended AS (
    SELECT queue, paused_at FROM {queues}
     WHERE queue = %(queue)s AND paused_at IS NOT NULL
       FOR UPDATE
)
UPDATE {queues} AS q SET paused_at = NULL
  FROM ended
 WHERE q.queue = ended.queue
RETURNING ended.paused_at;

-- name: migrations_table
CREATE TABLE IF NOT EXISTS {migrations} (
    version    integer PRIMARY KEY,
    title      text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_problems
-- What stops a command before it starts (names schema-qualified and quoted by the caller,
-- sent as values): a table it needs is not there (privilege NULL: started before `jobq
-- init`), or the role lacks a privilege on it (the grants of docs/security.md).
SELECT t.name, CASE WHEN to_regclass(t.name) IS NOT NULL THEN p.privilege END, current_user
  FROM unnest(%(names)s::text[], %(privileges)s::text[]) AS t(name, privileges)
 CROSS JOIN LATERAL unnest(string_to_array(t.privileges, ',')) AS p(privilege)
 WHERE to_regclass(t.name) IS NULL OR NOT has_table_privilege(to_regclass(t.name), p.privilege);

-- name: migrations_applied
SELECT version FROM {migrations} ORDER BY version;

-- name: migration_record
INSERT INTO {migrations} (version, title) VALUES (%(version)s, %(title)s);

-- name: migration_lock
-- Serialises concurrent `jobq init` runs on the same database.
SELECT pg_advisory_xact_lock(hashtext(%(key)s));

-- name: dead_list
-- The payload as text: a dead job may be one whose payload Python cannot parse (nested too
-- deeply); the listing must still show it.
SELECT id, kind, attempts, max_attempts, last_error, finished_at, payload::text, errors::text
  FROM {jobs}
 WHERE queue = %(queue)s AND status = 'dead'
 ORDER BY id
 LIMIT %(limit)s;

-- name: dead_requeue
-- Selected dead jobs back to pending with their attempts reset (ids or kinds; both NULL: all).
-- A dead job that could never run (migration 13's jobs_runnable_check: a kind, payload or
-- headers the rule refuses as pending) stays dead: one such row must not fail the requeue of
-- all the others; the caller names it (admin.py).
-- A requeued job gives up its unique key (migration 6): another job may hold it by now, or
-- several dead ones share it, and the requeue is the operator's explicit "run these again".
WITH requeued AS (
    UPDATE {jobs}
       SET status = 'pending', attempts = 0, run_at = now(), finished_at = NULL,
           last_error = NULL, locked_until = NULL, locked_by = NULL, key = NULL
     WHERE queue = %(queue)s AND status = 'dead'
       AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
       AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
       AND length(kind) BETWEEN 1 AND 200 AND jsonb_typeof(payload) = 'object'
       AND jsonb_typeof(headers) = 'object'
    RETURNING id
),
request AS (  -- a cancel request that outlived the job's last run must not stop the next
    DELETE FROM {cancels} WHERE job_id IN (SELECT id FROM requeued)
)
SELECT id FROM requeued ORDER BY id;

-- name: dead_unrunnable
-- Which of the given dead jobs could never run again (see dead_requeue), and why: `jobq dead
-- requeue --id` and `jobq jobs retry` refuse them by name rather than leave them dead unsaid.
SELECT id, CASE
           WHEN length(kind) = 0 THEN 'its kind is empty'
           WHEN length(kind) > 200 THEN 'its kind is longer than 200 characters'
           WHEN jsonb_typeof(payload) <> 'object' THEN
               'its payload is not a JSON object (got ' || jsonb_typeof(payload) || ')'
           ELSE 'its headers are not a JSON object (got ' || jsonb_typeof(headers) || ')'
       END
  FROM {jobs}
 WHERE queue = %(queue)s AND status = 'dead' AND id = ANY(%(ids)s::bigint[])
   AND NOT (length(kind) BETWEEN 1 AND 200 AND jsonb_typeof(payload) = 'object'
            AND jsonb_typeof(headers) = 'object')
 ORDER BY id;

-- name: dead_purge
WITH purged AS (
    DELETE FROM {jobs}
     WHERE queue = %(queue)s AND status = 'dead'
       AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
       AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
    RETURNING id
)
SELECT id FROM purged ORDER BY id;

-- name: prune_lock
-- Retention (transports/postgres/retention.py): one pruner at a time per schema and queue,
-- across processes and hosts. A session lock, held on the pruner's connection for its round
-- while each batch commits on its own; the two-key form, so it never meets migration_lock's
-- keys. Tried, never waited for: a consumer that finds it held skips the round.
SELECT pg_try_advisory_lock(hashtext('jobq prune'), hashtext(%(key)s));

-- name: prune_unlock
SELECT pg_advisory_unlock(hashtext('jobq prune'), hashtext(%(key)s));

-- name: prune
-- Delete up to %(batch)s rows of the queue in %(status)s finished more than %(older_than)s
-- seconds ago, in a transaction of its own: the locks it takes are a batch's and last one
-- statement. The literal status list lets the planner use jobs_finished_idx (migration 8)
-- whatever the parameter, in a generic plan too. SKIP LOCKED passes over a row another
-- transaction holds (a `jobq dead requeue`, another prune): never waited for, taken next
-- round. FOR UPDATE re-reads a row changed since the statement began, so a row requeued
-- meanwhile is not deleted. Rows without finished_at (none written by jobq) are kept.
-- Asynchronous commit (as claim's): a server crash can undo the last batches, whose rows are
-- then deleted again next round.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
doomed AS (
    SELECT id
      FROM {jobs}
     WHERE queue = %(queue)s AND status IN ('done', 'dead') AND status = %(status)s::text
       AND finished_at < now() - make_interval(secs => %(older_than)s)
     ORDER BY finished_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM {jobs} AS j
 USING doomed, async_commit
 WHERE j.id = doomed.id;

-- name: dead_existing
-- Which of the given ids are dead jobs of this queue (to refuse unknown ids by name).
SELECT id FROM {jobs} WHERE queue = %(queue)s AND status = 'dead' AND id = ANY(%(ids)s::bigint[]);

-- name: enqueue_bounded
-- enqueue (in a transaction, its id returned), for a queue with limits.max_pending: only as many rows go in, in order, as the queue
-- has room for (the caller waits and sends the rest again, then raises QueueFull).
-- The room is counted through jobs_pending_idx and the count stops at %(cap)s, so it costs at
-- most max_pending index entries, whatever the table holds. It takes no lock: producers
-- inserting at the same instant can each see the same room, overshooting by their batch.
WITH waiting AS (
    SELECT count(*) AS n
      FROM (SELECT 1 FROM {jobs} WHERE queue = %(queue)s AND status = 'pending' LIMIT %(cap)s) AS w
)
INSERT INTO {jobs} (queue, kind, payload, headers, max_attempts, run_at, priority)
SELECT %(queue)s, t.kind, t.payload::jsonb, t.headers::jsonb, t.max_attempts,
       now() + make_interval(secs => t.delay), t.priority
  FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(headers)s::text[],
              %(max_attempts)s::int[], %(delays)s::float8[], %(priorities)s::smallint[])
       WITH ORDINALITY AS t(kind, payload, headers, max_attempts, delay, priority, ord)
 WHERE t.ord <= %(cap)s - (SELECT n FROM waiting)
 ORDER BY t.ord
RETURNING id, pg_current_xact_id()::text;

-- name: schedule_seen
-- A schedule's first sight records the tick it starts after, firing nothing: a new schedule
-- enqueues none of the ticks from before it existed. Returns a row only when it was new.
INSERT INTO {schedules} (queue, name, last_tick)
VALUES (%(queue)s, %(name)s, %(tick)s)
ON CONFLICT (queue, name) DO NOTHING
RETURNING last_tick;

-- name: schedule_take
-- Inside the firing transaction: the schedule's row, locked, if ``tick`` is later than the last
-- one fired. SKIP LOCKED: a process firing it right now has it; this one fires nothing.
SELECT last_tick
  FROM {schedules}
 WHERE queue = %(queue)s AND name = %(name)s AND last_tick < %(tick)s
   FOR UPDATE SKIP LOCKED;

-- name: schedule_last
-- After schedule_take found nothing: was the tick fired already, or is another process firing
-- it right now (its row locked)? No lock: the answer is as of now.
SELECT last_tick FROM {schedules} WHERE queue = %(queue)s AND name = %(name)s;

-- name: schedule_fired
-- Same transaction as the tick's enqueue: both commit or neither.
UPDATE {schedules} SET last_tick = %(tick)s WHERE queue = %(queue)s AND name = %(name)s;

-- name: schedule_list
-- `jobq schedules`: the last tick each schedule fired on this queue.
SELECT name, last_tick FROM {schedules} WHERE queue = %(queue)s;

-- Job control (`jobq jobs`, admin.py; docs/architecture.md, "Job control"). A job's state as
-- the commands show it is its status, except in transaction mode, where a running job's row
-- stays pending to everyone but its own transaction, which holds the row locked: a pending row
-- some consumer picked (locked_by) that a FOR SHARE SKIP LOCKED probe cannot lock is running.
-- The probe takes no lock it keeps (the statement's own transaction ends at once), and a claim
-- that meets it waits for nothing (SKIP LOCKED) but may pass the row over for that instant.

-- name: job_show
-- A pending row that a transaction holds is running in transaction mode, on the attempt its
-- take counts uncommitted (see jobs_running: one too many for a job found abandoned).
SELECT j.id, j.kind, CASE WHEN h.held THEN 'running' ELSE j.status END,
       j.payload::text, j.headers::text, j.attempts + h.held::int, j.max_attempts, j.last_error,
       j.created_at, j.run_at, j.finished_at, j.locked_by, j.key,
       EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id), j.errors::text
  FROM {jobs} AS j,
       LATERAL (SELECT j.status = 'pending' AND j.locked_by IS NOT NULL
                       AND NOT EXISTS (SELECT FROM {jobs} AS l WHERE l.id = j.id
                                         FOR SHARE SKIP LOCKED) AS held) AS h
 WHERE j.queue = %(queue)s AND j.id = %(id)s;

-- name: jobs_pending
-- `jobq jobs list --state pending`: in the order they will be handed out (jobs_pending_idx),
-- delayed ones after the due ones. In transaction mode the running ones are skipped (see above).
SELECT * FROM (
    SELECT j.id, j.kind,
           CASE WHEN j.locked_by IS NOT NULL
                     AND NOT EXISTS (SELECT FROM {jobs} AS l WHERE l.id = j.id FOR SHARE SKIP LOCKED)
                THEN 'running' ELSE j.status END AS state,
           j.payload::text, j.headers::text, j.attempts, j.max_attempts, j.last_error,
           j.created_at, j.run_at, j.finished_at, j.locked_by, j.key,
           EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
      FROM {jobs} AS j
     WHERE j.queue = %(queue)s AND j.status = 'pending'
       AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
     ORDER BY j.run_at, j.id
) AS listed
 WHERE state = 'pending'
 LIMIT %(limit)s;

-- name: jobs_running
-- Lease mode's running rows (jobs_running_queue_idx), then transaction mode's: pending rows a
-- consumer picked whose row a transaction holds (see above), among the first 1,000 due ones a
-- consumer ever picked, in hand-out order (jobs_pending_idx): running ones are among the first
-- due, and the probes (each held to the statement's end) stay few. Their attempts: the one
-- running, which its take counts uncommitted (txn_pick), so one more than committed (one too
-- many for the few a pick found abandoned by a dead consumer and counted itself).
SELECT * FROM (
    (SELECT j.id, j.kind, 'running' AS state,
            j.payload::text, j.headers::text, j.attempts, j.max_attempts, j.last_error,
            j.created_at, j.run_at, j.finished_at, j.locked_by, j.key,
            EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
       FROM {jobs} AS j
      WHERE j.queue = %(queue)s AND j.status = 'running'
        AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      LIMIT %(limit)s)
    UNION ALL
    (SELECT j.id, j.kind, 'running',
            j.payload::text, j.headers::text, j.attempts + 1, j.max_attempts, j.last_error,
            j.created_at, j.run_at, j.finished_at, j.locked_by, j.key,
            EXISTS (SELECT FROM {cancels} AS c WHERE c.job_id = j.id)
       FROM (SELECT id FROM {jobs}
              WHERE queue = %(queue)s AND status = 'pending' AND run_at <= now()
                AND locked_by IS NOT NULL
              ORDER BY run_at, id
              LIMIT 1000) AS candidate
       JOIN {jobs} AS j ON j.id = candidate.id
      WHERE (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
        AND NOT EXISTS (SELECT FROM {jobs} AS l WHERE l.id = j.id FOR SHARE SKIP LOCKED)
      LIMIT %(limit)s)
) AS listed
 ORDER BY id
 LIMIT %(limit)s;

-- name: jobs_finished
-- `jobq jobs list --state dead|done|cancelled`: newest first, by id (the primary key, read
-- backwards; each state's rows are a share of the queue's, so the walk stops after about
-- %(limit)s of them times that share's inverse).
SELECT j.id, j.kind, j.status, j.payload::text, j.headers::text, j.attempts, j.max_attempts,
       j.last_error, j.created_at, j.run_at, j.finished_at, j.locked_by, j.key, false
  FROM {jobs} AS j
 WHERE j.queue = %(queue)s AND j.status = %(status)s::text
   AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
 ORDER BY j.id DESC
 LIMIT %(limit)s;

-- name: cancel_pending
-- `jobq jobs cancel` of a job that is not running: cancelled in place, and no claim takes it.
-- A row a transaction holds this instant (a claim, a relay batch, a `jobq jobs` probe) is
-- waited for, up to %(lock_wait)s (lock_timeout, for this statement only); one held longer
-- is a transaction-mode job running now, which gets a request (cancel_request) instead. A
-- transaction-mode pick that picked the job but has not taken it yet finds it gone and moves
-- on.
WITH wait AS (
    SELECT set_config('lock_timeout', %(lock_wait)s, true)
),
target AS (
    SELECT j.id FROM {jobs} AS j, wait
     WHERE j.queue = %(queue)s AND j.id = %(id)s AND j.status = 'pending'
       FOR UPDATE OF j
)
UPDATE {jobs} AS j
   SET status = 'cancelled', finished_at = now(), locked_until = NULL,
       last_error = 'cancelled by an operator (jobq jobs cancel) before it ran'
  FROM target
 WHERE j.id = target.id
RETURNING j.id;

-- name: cancel_request
-- A job running now: the request its consumer finds within about a second (cancels_held).
-- Nothing is inserted for a job that ended meanwhile (or was asked already: RETURNING tells).
INSERT INTO {cancels} (job_id, queue)
SELECT id, queue FROM {jobs}
 WHERE queue = %(queue)s AND id = %(id)s AND status IN ('pending', 'running')
    ON CONFLICT (job_id) DO NOTHING
RETURNING job_id;

-- name: cancels_stale
-- Requests whose job ended without seeing them (it finished first, or was deleted): cleared by
-- each `jobq jobs cancel` of the queue. The table holds a few rows at most.
DELETE FROM {cancels} AS c
 WHERE c.queue = %(queue)s
   AND NOT EXISTS (SELECT FROM {jobs} AS j
                    WHERE j.id = c.job_id AND j.status IN ('pending', 'running'))
RETURNING c.job_id;

-- name: cancels_held
-- Each consumer, about once a second while it runs jobs: which of them an operator cancelled.
-- Primary-key probes of a table that is empty unless someone just ran `jobq jobs cancel`.
SELECT job_id FROM {cancels} WHERE job_id = ANY(%(ids)s::bigint[]);

-- name: cancel
-- Lease mode: a running job its consumer stopped at the operator's request (cancels_held):
-- cancelled for good, the request deleted. Only by the claim that holds it (token: see ack);
-- a stale claim (its lease rescued) writes nothing and leaves the request to the current one.
WITH settled AS (
    UPDATE {jobs}
       SET status = 'cancelled', last_error = %(reason)s, finished_at = now(),
           locked_until = NULL, locked_by = NULL
     WHERE id = %(id)s AND status = 'running' AND locked_by = %(token)s
    RETURNING id
),
request AS (
    DELETE FROM {cancels} WHERE job_id IN (SELECT id FROM settled)
)
SELECT id FROM settled;

-- name: run_now
-- `jobq jobs retry` of a pending job that is not due yet (a delay, or a retry's backoff): due
-- now, its attempts as they are, and the queue's consumers woken.
WITH moved AS (
    UPDATE {jobs} SET run_at = now()
     WHERE queue = %(queue)s AND id = %(id)s AND status = 'pending' AND run_at > now()
    RETURNING id, queue
),
request AS (  -- as dead_requeue's
    DELETE FROM {cancels} WHERE job_id IN (SELECT id FROM moved)
)
SELECT id, pg_notify(%(channel)s, queue) FROM moved;

-- `jobq relay` (relay.py, transports/postgres/outbox.py): a queue's pending jobs published to
-- RabbitMQ in one transaction per batch: lock, take, publish (confirmed), mark, COMMIT.

-- name: relay_lock
-- One relay at a time per schema and queue, for one batch's transaction: the batches of several
-- relays follow each other, each published and confirmed before the next is taken, so jobs
-- reach RabbitMQ in the order they are taken. Tried, never waited for.
-- The batch's transaction stays open while RabbitMQ confirms (bounded by rabbitmq.publish_timeout
-- and limits.enqueue_timeout): idle_in_transaction_session_timeout is lifted for it, or a
-- server that sets one below that would end it after the broker confirmed, and publish the
-- same batch again and again.
SELECT pg_try_advisory_xact_lock(hashtext('jobq relay'), hashtext(%(key)s)),
       set_config('idle_in_transaction_session_timeout', '0', true);

-- name: relay_take
-- The queue's pending jobs in hand-out order (jobs_pending_idx), delayed ones too (they go on
-- waiting in RabbitMQ for what is left of their delay), locked until the batch commits.
SELECT id, kind, payload::text, headers::text, max_attempts, run_at, priority
  FROM {jobs}
 WHERE queue = %(queue)s AND status = 'pending'
 ORDER BY run_at, id
 LIMIT %(limit)s
   FOR UPDATE;

-- name: relay_done
-- In the batch's transaction, after RabbitMQ confirmed every job of it: done here, its
-- outcome RabbitMQ's. Retention prunes these rows as any done ones.
UPDATE {jobs}
   SET status = 'done', finished_at = now(), locked_by = 'relayed to RabbitMQ'
 WHERE id = ANY(%(ids)s::bigint[]);

-- `jobq move` (move.py, transports/postgres/moves.py): a queue's waiting or dead jobs between
-- backends, a batch per transaction.

-- name: move_pending
-- The jobs to hand over, locked until the batch commits (SKIP LOCKED: a job a consumer or
-- another move holds this instant stays), in hand-out order (jobs_pending_idx); delayed ones
-- too, never a running one.
SELECT id, kind, payload::text, headers::text, attempts, max_attempts, run_at, last_error,
       finished_at, priority
  FROM {jobs}
 WHERE queue = %(queue)s AND status = 'pending'
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY run_at, id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- name: move_dead
-- As move_pending, the dead jobs oldest first (jobs_dead_idx).
SELECT id, kind, payload::text, headers::text, attempts, max_attempts, run_at, last_error,
       finished_at, priority
  FROM {jobs}
 WHERE queue = %(queue)s AND status = 'dead'
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- name: move_forget
-- In the batch's transaction, once the other backend has the jobs: gone from here.
DELETE FROM {jobs} WHERE id = ANY(%(ids)s::bigint[]);

-- name: move_in
-- Jobs from RabbitMQ, keeping their ids where they are integers (jobq's are: random 63-bit);
-- another id (a foreign producer's text) gets a new one from the table's identity. A job
-- already here under its id (moved twice: a move killed after its COMMIT, before its acks)
-- is not inserted again. The trigger wakes the consumers at COMMIT, as for any enqueue.
INSERT INTO {jobs} AS j (id, queue, kind, payload, headers, status, attempts, max_attempts,
                         run_at, last_error, finished_at, priority)
OVERRIDING SYSTEM VALUE
SELECT coalesce(t.id, nextval(pg_get_serial_sequence(%(table)s, 'id'))), %(queue)s, t.kind,
       t.payload::jsonb, t.headers::jsonb, t.status, t.attempts, t.max_attempts,
       coalesce(t.run_at, now()), t.last_error, t.finished_at, t.priority
  FROM unnest(%(ids)s::bigint[], %(kinds)s::text[], %(payloads)s::text[], %(headers)s::text[],
              %(statuses)s::text[], %(attempts)s::int[], %(max_attempts)s::int[],
              %(run_ats)s::timestamptz[], %(errors)s::text[], %(finished)s::timestamptz[],
              %(priorities)s::smallint[])
       AS t(id, kind, payload, headers, status, attempts, max_attempts, run_at, last_error,
            finished_at, priority)
    ON CONFLICT (id) DO NOTHING
RETURNING j.id;

-- name: move_existing
-- After move_in: the jobs already here under ids it skipped, to tell a job moved twice (the
-- same kind and payload) from another that happens to have the same id.
SELECT id, kind, payload::text FROM {jobs} WHERE id = ANY(%(ids)s::bigint[]);

-- name: relay_refused
-- In the batch's transaction: jobs RabbitMQ could never take (too large for the relay's
-- limits, a kind or payload its checks refuse), dead here with the reason, so that one of them
-- does not stop the queue's relay at every batch. `jobq dead requeue` brings them back.
UPDATE {jobs} AS j
   SET status = 'dead', finished_at = now(), last_error = t.reason
  FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS t(id, reason)
 WHERE j.id = t.id;
