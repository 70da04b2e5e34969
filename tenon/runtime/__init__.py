"""The runtime: the I/O edges every service stands on.

The event log (:mod:`.eventlog`, one interface with a JetStream and an in-memory implementation), Kubernetes
access (:mod:`.kube`), leader election, structured logs, validated settings, projection snapshots, and the
decider runtime that turns a pure decider plus an executor into a running, replayable service. May import
``proto``, :mod:`tenon.core` and :mod:`tenon.domain`; never a service, the CLI or a development tool.
"""
