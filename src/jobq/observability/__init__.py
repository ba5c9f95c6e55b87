"""What a consumer tells the people who run it: logs, metrics, health, traces, stacks.

- ``logs``: log set-up, text for people, JSON lines for machines.
- ``metrics``: Prometheus metrics (own registry) and the /metrics, /healthz, /readyz endpoint;
  ``metrics_jobs`` and ``metrics_kinds`` keep the per-job and per-kind figures cheap and bounded.
- ``monitor``: the periodic duties: queue depth into the metrics, a summary line, liveness.
- ``tracing``: OpenTelemetry traces (the ``otel`` extra).
- ``stacks``: every task's and thread's stack, logged on SIGUSR1.
"""
