"""What the crawl has already seen: the entries of each source (:mod:`.entry_memory`), the
stories across sources (:mod:`.story_memory`) and, with full articles, the stories their
articles tell (:mod:`.article_stories`)."""
