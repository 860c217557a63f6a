"""The re-crawl service: one crawl of a set of feeds, its sources, entry memory, configuration,
state store and clocks. No Scrapy import; driven alike by Scrapy, the cluster, the simulator and
the benchmarks.

At the top, what its callers use: the service (:mod:`.recrawl`, the façade that composes the
parts), the interface the adapters call (:mod:`.sink`), the types they share (:mod:`.types`),
the clocks, the settings (:mod:`.config`, :mod:`.policy_options`, :mod:`.invalid_setting`) and
:mod:`.once_log`. The parts, by concern: :mod:`.decisions` (epochs, plans, the policy, what
crawls showed), :mod:`.sources` (the sources, their retirement, those found or pushed on the
way), :mod:`.hosts` (politeness per host), :mod:`.memory` (entries and stories seen),
:mod:`.state` (checkpoints, the store, the delivery journal)."""
