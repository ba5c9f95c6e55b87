"""The worker pool, as parts that pass work one way: fetch -> execute -> decide -> settle.

A newcomer's map (docs/architecture.md, "The flow", has the why):

- ``pool``: ``WorkerPool``, the small facade the commands use; it makes the parts, holds the
  one lifecycle state (``lifecycle.State``) and runs the shutdown order.
- ``lifecycle``: that state (starting, running, paused, draining, forced, stopped) and the
  events that wake whoever waits for a stop.
- ``capacity``: the bounded buffer and its accounting (what is held, the room to receive
  more, the buffer's size, the deliveries set aside to run alone or held back at a pause).
- ``fetcher``: the receive loop; asks the transport for free room only, one receive ahead,
  backs off when receiving fails, holds while the queue is paused, runs a crash suspect alone.
- ``workers``: the worker tasks: each takes a delivery, has it executed and settled; one that
  dies is replaced and the job it held settled as a failure.
- ``executor``: runs one handler and says how it ended (None, or the error it failed with).
- ``interrupts``: what cuts a running handler (its job timeout, an operator's cancel, the
  shutdown deadline).
- ``settler``: the one place that turns an outcome or a transport's fact into a decision
  (``job.Decision``), has the transport carry it out, and counts, observes and logs it.
- ``stats``: ``PoolStats`` (what a run did) and ``PoolObserver`` (the metrics' hook).
- ``bounds``: the pool's time bounds (``RELEASE_TIMEOUT``, ``INTERRUPT_GRACE``, ...).
- ``retry``: ``RetryPolicy``, what a failure means: retry after the backoff, or dead.
- ``handback``: deliveries taken and never started, handed back all at once (stop, pause).
- ``pausing``: ``PauseWatch``, what a consumer knows of its queue's pause.
- ``sizing``: how many deliveries the pool holds beyond its running ones.

The handlers it runs:

- ``processor``: the user's handler, loaded from ``module:function`` or a built-in's name.
- ``routing``: one processor per job kind, the single ``processor`` as the default.
- ``threads``: the threads plain ``def`` handlers run in.
"""
