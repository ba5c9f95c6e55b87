"""The RabbitMQ backend: a durable queue with a dead-letter exchange, acked on success.

``consumer`` is the transport, over a ``session`` (channel, acks) on a ``connect`` link;
``codec`` is the one wire format, ``topology`` the declared exchanges and queues. Nothing
here imports the PostgreSQL backend.
"""
