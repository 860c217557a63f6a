"""The offline simulated web: the papers' models, named scenarios, benchmarks, a feed server.

The repository's test bed, not part of the installed package (run from the repository root:
``python -m sim.bench ...``). Grouped by concern:

* ``sim.web``: the simulated web, served over HTTP by ``python -m sim.serve``;
* ``sim.crawls``: the crawls and processes the benchmarks and tests start against it;
* ``sim.bench``: the benchmarks, ``python -m sim.bench [NAME] [options]``;
* ``sim.experiments``: the papers' figures; ``sim.data``: recorded traces and pages.

The web a crawl runs against (``sim.serve`` and what it imports) uses the package's core, clock
and trace format, never the crawler; the benchmarks drive the whole product, Scrapy included
(tests/test_layers.py).
"""
