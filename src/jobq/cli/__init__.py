"""The command-line programs: ``consumer``, ``producer`` and ``jobq`` (admin).

- ``main``: the argument parsers and the entry points; imports nothing heavy before it must.
- ``commands``: what each command does once its settings are loaded; every one returns an exit code.
"""
