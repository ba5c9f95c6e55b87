"""The worker pool's parts (``jobq.pool.WorkerPool`` uses them).

- ``interrupts``: what cuts a running handler (its job timeout, an operator's cancel, the
  shutdown deadline).
"""
