"""Feeds as the re-crawl service sees them: parsing (feedparser-rs, feedparser), the parse
pool and its worker processes, HTTP dates and what servers and feeds say about when to come
back. No Scrapy import."""
