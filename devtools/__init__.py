"""Development tools: what lets tenon run and be tested on one machine, and nothing that runs in production.

The sandbox Kubernetes API with its simulated control plane (:mod:`.sandbox`), the local NATS broker
(:mod:`.broker`), the whole local stack that ``tenon up``, the end-to-end tests and ``make bench`` stand on
(:mod:`.stack`), an OpenStack stub (:mod:`.openstack_stub`) and the ``tenon up | sandbox | broker`` commands
(:mod:`.cli`, plugged into ``tenon`` through an entry point). Tools here may import tenon; nothing in tenon
imports them (``make lint`` checks it).
"""
