"""tenon's services, one package each; they share nothing but the event log.

A service is a pure decider (state, input -> effects), an executor that carries the effects out, and a settings
object; :mod:`tenon.runtime` runs them. A service may import ``proto``, :mod:`tenon.core`,
:mod:`tenon.domain` and :mod:`tenon.runtime`, never another service (``make lint`` checks it).
"""
