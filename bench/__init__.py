"""`make bench`: every speed, quality and memory target, one suite per module (see ``bench/__main__.py``).

Benches may use everything (tenon, devtools, the core's internals, which some suites measure on purpose);
nothing imports them. Figures go to ``bench/results.json``; targets are reported, never asserted in tests.
"""
