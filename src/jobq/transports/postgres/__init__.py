"""The PostgreSQL backend: a jobs table claimed with ``SELECT ... FOR UPDATE SKIP LOCKED``.

``lease`` and ``transaction`` are the two claim modes; ``publisher`` enqueues, ``admin``
migrates and inspects; the SQL lives in ``sql/``. Nothing here imports the RabbitMQ backend.

``enqueue_sync`` / ``enqueue_many_sync``: enqueue in a sync psycopg connection's own
transaction (see joined.py).
"""

from jobq.transports.postgres.joined import enqueue_many_sync, enqueue_sync

__all__ = ["enqueue_many_sync", "enqueue_sync"]
