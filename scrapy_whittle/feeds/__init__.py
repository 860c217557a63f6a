"""Feeds as the re-crawl service sees them: parsing (RSS / Atom by feedparser-rs or feedparser,
JSON Feed, sitemaps; the kind told from the body), the parse pool and its worker processes,
HTTP dates and what servers and feeds say about when to come back. No Scrapy import."""
