"""``make stack`` (``python -m tools.stack``): compose/docker-compose.yml run as local processes.

``runner`` starts and stops the processes, ``composefile`` reads the compose file (and the
tests check it with it), ``cleanup`` removes what a run created on the shared servers.
"""
