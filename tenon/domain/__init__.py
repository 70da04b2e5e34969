"""The domain: what tenon knows about NodeClaims and the cluster, as pure code over events.

Here live the NodeClaim aggregate (the one definition of a claim's state and phase), the cluster projection
that deciders read, the well-known Kubernetes names tenon reads and writes, and the explanations people read.
No I/O and no clock of its own: callers pass the time in. May import ``proto`` and :mod:`tenon.core` only.
"""
