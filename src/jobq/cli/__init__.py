"""The command-line programs: ``consumer``, ``producer`` and ``jobq`` (admin).

- ``main``: the argument parsers and the entry points; imports nothing heavy before it must.
- ``running``: a command's settings from its command line; its errors as one line and an exit
  code.
- ``consume``: the ``consumer`` command: the worker pool until a stop signal (or drained).
- ``commands``: what every other command does once its settings are loaded; each returns an
  exit code.
- ``loops``: the event loop the commands run on (uvloop if asked for and installed).
"""
