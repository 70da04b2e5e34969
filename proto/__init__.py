"""The event contracts: every stream, subject and event tenon's services and tools agree on.

The map is ``proto/README.md``. This package imports nothing else of ours, so any tool (or another language's
code generator, from ``proto/schemas``) can depend on it alone.
"""
