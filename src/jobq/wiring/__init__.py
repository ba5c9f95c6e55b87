"""The composition root and the process around it: the only package that knows dependency-injector.

- ``container``: builds every object from the settings (transports, pool, observers, schedules).
- ``derived``: what is derived from the settings to wire a process (pool sizes, buffers, prefetch).
- ``observing``: the tracing, metrics server and monitor as the container builds them.
- ``handling``: the consumer's handler (an app's tasks or the processors) and an app's
  start-up and shutdown hooks around its run.
- ``startup``: opening a transport against a server that may drop a connection at any moment.
- ``backstop``: the last bound on a shutdown: a consumer still alive past it logs every stack and exits.
"""
