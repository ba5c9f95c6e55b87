"""The failover drills (`make cluster`), on servers of the harness's own: see faults/cluster/run.py.

- RabbitMQ: a 3-node cluster (faults/cluster/nodes.py), a quorum work queue with a replica on
  every node; consumers and a producer given every node's URL (``rabbitmq.urls``); at 30 % of
  the drain the node leading the queue is killed with -9 and stays down.
- PostgreSQL: a primary and a streaming standby (faults/cluster/standby.py); consumers and a
  producer given the two-host DSN with ``target_session_attrs=read-write``; at 30 % the primary
  is stopped with ``-m immediate`` and, ``--promote-after`` seconds later, the standby promoted.

Each drill starts its servers fresh and deletes them afterwards, also when it fails or is
interrupted; the machine's own PostgreSQL and RabbitMQ are not touched.
"""
