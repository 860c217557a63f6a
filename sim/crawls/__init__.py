"""What the benchmarks and the tests start to crawl the simulated web: bare Scrapy, a cluster's
crawler process, the callback proxy in front of a cluster, the planner's load, and the
processes around them (redis-server, free ports, the CPU a process used).

It may use the simulated web (``sim.web``), never the benchmarks (tests/test_layers.py).
"""
