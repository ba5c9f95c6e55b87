"""The worker pool's parts (``jobq.pool.WorkerPool`` uses them).

- ``interrupts``: what cuts a running handler (its job timeout, an operator's cancel, the
  shutdown deadline).
- ``stats``: ``PoolStats`` (what a run did) and ``PoolObserver`` (the metrics' hook).
- ``bounds``: the pool's time bounds (``RELEASE_TIMEOUT``, ``INTERRUPT_GRACE``, ...).
"""
