"""What to crawl and what the crawls taught: the epochs (:mod:`.epochs`), each decision step's
plan (:mod:`.planning`), the discovery sweep of sources never fetched (:mod:`.discovery`), the
policy and what it has not been told yet (:mod:`.policy_keeper`), what crawls showed, learned in
batches (:mod:`.outcomes`), and the users' measures (:mod:`.measures`)."""
