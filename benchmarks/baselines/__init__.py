"""The bare-client loops jobq is measured against, each one a process the benchmark starts.

``pg_batch`` (target raw-psycopg): batch claims, one UPDATE acks the batch; ``pg_one``
(raw-psycopg-one): a transaction per job; ``amqp`` (raw-aio-pika, raw-aio-pika-classic): a
bare aio-pika consumer; ``pika_consumer`` (raw-pika, raw-pika-classic): a bare pika one, the
fastest Python client. Their SQL and settings live here, not in jobq: this is not jobq.
"""
