"""Politeness per host: the allowances an epoch's plan keeps within (:mod:`.host_allowances`),
rising latency as an overload signal (:mod:`.host_latency`), and the throttle that selects within
the allowances and hears each crawl's answer (:mod:`.host_throttle`)."""
