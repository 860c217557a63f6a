"""The simulated web: the papers' source models (``ephemeral``, ``pages``, ``diurnal``,
``push_web``), the named scenarios, traces, and what ``python -m sim.serve`` serves over HTTP
(feeds, hosts that rate-limit, faults, sites, article pages, a WebSub hub).

It uses the package's models, clock and trace format, never the crawler: it imports nothing
of ``sim.crawls`` or ``sim.bench`` (tests/test_layers.py).
"""
