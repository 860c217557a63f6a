"""The re-crawl service: one crawl of a set of feeds, its sources, entry memory, configuration,
state store and clocks. No Scrapy import; driven alike by Scrapy, the cluster, the simulator and
the benchmarks."""
