"""The job model and the port: what every other package builds on, and imports nothing of them.

- ``job``: the values that travel: ``Job``, ``Delivery``, ``Outcome``, the facts a transport
  reports and the worker's ``Decision`` (``Ack``, ``RetryIn``, ``Dead``, ``Cancelled``, ``Release``).
- ``port``: the one boundary between the worker and a queue backend: ``Transport`` (seven
  members), ``Publisher``, the admin roles (``Inspect``, ``Control``, ``DeadLetters``) and ``NewJob``.
- ``errors``: what handlers raise and what jobq raises, and the reason text of a failure.
- ``limits``: the message checks every transport shares (what may be enqueued and accepted).
- ``due``, ``durations``: when a new job is due; durations as people write them.
- ``backoff``, ``within``, ``looks``: the one backoff, ``asyncio.wait_for`` without its race,
  and a look at a server that no cancel cuts in the middle.
"""
