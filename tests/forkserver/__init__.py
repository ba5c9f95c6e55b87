"""The tests' ``consumer``, ``producer`` and ``jobq`` commands, started in milliseconds.

A CLI started the usual way spends about 0.3 s of CPU importing jobq, psycopg, aio-pika and
dependency-injector before it does anything; the suite starts hundreds, and CI's two cores are
busy through its first step. So each test process starts one server (``python -m
tests.forkserver``) that has imported all of that once, with no thread, event loop or
connection of its own, and forks one child per command. The child takes the test's pipes as
its stdin, stdout and stderr, the command's environment, working directory and argv, and runs
the console script's entry point (``[project.scripts]``), ending as a Python process ends.

The test holds a ``Forked``: a ``subprocess.Popen`` whose pid is the child's (signals,
``kill -9`` included, go straight to it) and whose exit status the server reports when it has
reaped the child. A command whose environment would change how Python starts (another
``PYTHONPATH``, say) is started the usual way, as is every command with
``JOBQ_TESTS_EXEC=1`` in the tests' environment. The installed scripts themselves are run by the
wheel and demo tests.
"""

from tests.forkserver.client import Forked, ForkServer, popen, run

__all__ = ["ForkServer", "Forked", "popen", "run"]
