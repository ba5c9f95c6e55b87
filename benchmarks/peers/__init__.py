"""Peer targets: the queue libraries a team would otherwise install, driven on the same cases.

Each module is one peer's producer and consumer, run as processes by the benchmark harness
exactly as jobq's are (``python -m benchmarks.peers.<peer> produce|consume|install|drop``):
the same numbered jobs (payload ``n``, and ``sent_at`` when stamped), the same completion
record (benchmarks.processors.Recorder) and start gate, the same "consuming queue" line once
connected. Their libraries come from the ``peers`` extra (``pip install -e '.[peers]'``); a
peer whose library is missing, or that cannot run a scenario, is reported as such.
"""
