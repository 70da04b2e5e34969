"""tenon: a Kubernetes node autoscaler, event-sourced over NATS JetStream.

The folders are the layers, lowest first; each may import only those below it (``make lint`` checks it with
import-linter, see ``[tool.importlinter]`` in ``pyproject.toml``):

``proto`` (beside this package)
    The event contracts every service and every tool agrees on. Imports nothing of ours.
:mod:`tenon.core`
    The pure scheduling core: plain data in, a plan out. Imports nothing of ours, not even ``proto``.
:mod:`tenon.domain`
    What tenon knows, as pure code over events: the NodeClaim aggregate, the cluster projection, well-known
    names, explanations. Imports ``proto`` and the core.
:mod:`tenon.runtime`
    The I/O edges every service stands on: the event log, Kubernetes access, leader election, logs, settings,
    snapshots, and the decider runtime that turns a pure decider into a running service.
:mod:`tenon.services`
    One package per service. A service imports the layers below, never another service.
:mod:`tenon.cli`
    The ``tenon`` command on top of everything. Nothing imports it.

Development tools (the sandbox cluster, the local stack, the local broker, stubs) live in ``devtools``, beside
this package: they may use tenon, but nothing in tenon imports them.
"""
