"""The worker pool's parts (``jobq.pool.WorkerPool`` uses them).

- ``lifecycle``: the pool's one lifecycle state (starting, running, paused, draining, forced,
  stopped) and the events that wake whoever waits for a stop.
- ``interrupts``: what cuts a running handler (its job timeout, an operator's cancel, the
  shutdown deadline).
- ``stats``: ``PoolStats`` (what a run did) and ``PoolObserver`` (the metrics' hook).
- ``bounds``: the pool's time bounds (``RELEASE_TIMEOUT``, ``INTERRUPT_GRACE``, ...).
"""
