"""The sources: where they come from and the registry that numbers them (:mod:`.registry`), what
is known of each (:mod:`.source_table`, :mod:`.source_state`), how they retire and return
(:mod:`.retirement`), and those found or pushed on the way: the feeds of searched sites
(:mod:`.site_table`), the children of sitemap indexes (:mod:`.index_children`), the WebSub
subscriptions (:mod:`.websub`)."""
