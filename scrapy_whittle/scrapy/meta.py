"""Every key scrapy-whittle sets in a request's ``meta``, in one place.

The first six are the spider's to read (``FeedSpider`` reads them; a spider of one's own may
too): they say which source a response is of and what its fetch found. The others are the
crawl's own book-keeping between the scheduler, the middlewares and the spider: a project
should not set or read them.
"""

from __future__ import annotations

# -- for the spider -------------------------------------------------------------------------
#: the source's id in the crawl (an int), on every request of a feed
META_SOURCE_ID = "whittle_source_id"
#: the source's URL as the crawl knows it (a moved feed: its new one)
META_SOURCE_URL = "whittle_source_url"
#: the new entries a feed's response showed (a list of ``FeedEntry``), set by
#: ``FeedObserverMiddleware``
META_ENTRIES = "whittle_entries"
#: the values of those entries, aligned with them
META_VALUES = "whittle_values"
#: when they were found (unix seconds, the crawl's clock)
META_TIME = "whittle_time"
#: the error kind of an unusable response (``whittle/errors/<kind>``)
META_ERROR = "whittle_error"

# -- the crawl's own ------------------------------------------------------------------------
#: the scheduler's ``Crawl`` a feed request carries
META_CRAWL = "whittle_crawl"
#: a spider's request asking the scheduler to register its URL as a source
META_REGISTER = "whittle_source"
#: a template's own errback, called after the scheduler's
META_ERRBACK = "whittle_errback"
#: the scheduler set ``verbatim_url``: the URL needs no escaping
META_PLAIN = "whittle_plain_url"
#: the sources a response named (a sitemap index's children), for the spider to register
META_SOURCES = "whittle_sources"
#: a request of the crawl's own (to a hub, a delivery to hand out): served first, no budget
META_OUTSIDE = "whittle_outside"
#: a WebSub delivery's ``Push`` (answered by ``FeedObserverMiddleware`` without a download)
META_PUSH = "whittle_push"
#: a request to a WebSub hub
META_HUB_REQUEST = "whittle_websub"
#: a request of a site's search for its feeds
META_SEARCH = "whittle_site_search"
#: a request of the source list (``WHITTLE_SOURCES`` given as a URL)
META_LIST = "whittle_source_list"
#: a feed response's batch of new entries in the delivery journal
META_BATCH = "whittle_batch"
#: a replay request's ``Batch`` (entries a killed run had not delivered)
META_REPLAY = "whittle_replay"
#: an article request's item, before its article
META_ARTICLE = "whittle_article"
#: the delivery batch that item belongs to
META_ARTICLE_OF = "whittle_article_of"
#: the article response's ``Article``, or its failure's kind
META_RESULT = "whittle_article_result"
#: the crawl ended before the article request could go
META_UNSENT = "whittle_article_unsent"
#: (source id, value) of the article's entry
META_ENTRY = "whittle_article_entry"
#: how the article repeats a known story, if it does
META_REPEAT = "whittle_article_repeat"
