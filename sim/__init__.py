"""The offline simulated web: the papers' models, named scenarios, benchmarks, a feed server.

Imports the pure core of ``scrapy_whittle``, never Scrapy's engine.
"""
