"""What puts jobs into a queue besides the application's own ``enqueue``.

- ``schedules``: periodic schedules (``schedules:`` in config), their ticks and the loop that fires them.
- ``relay``: ``jobq relay``, a PostgreSQL queue's jobs published to RabbitMQ, at least once, in order.
- ``move``: ``jobq move``, a queue's waiting or dead jobs from one backend to the other.
- ``pacing``: the producer's open-loop sender (``producer --rate``).
"""
