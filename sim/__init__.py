"""The offline simulated web: the papers' models, named scenarios, benchmarks, a feed server.

The repository's test bed, not part of the installed package (run from the repository root:
``python -m sim.bench ...``). The web a crawl runs against (``sim.serve`` and what it imports)
uses the package's core, clock and trace format, never the crawler; the benchmarks drive the
whole product, Scrapy included (tests/test_layers.py).
"""
