"""The PostgreSQL backend: a jobs table claimed with ``SELECT ... FOR UPDATE SKIP LOCKED``.

``lease`` and ``transaction`` are the two claim modes; ``publisher`` enqueues, ``admin``
migrates and inspects; the SQL lives in ``sql/``. Nothing here imports the RabbitMQ backend.
"""
