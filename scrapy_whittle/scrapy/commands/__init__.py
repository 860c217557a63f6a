"""scrapy-whittle's Scrapy commands (``scrapy whittle ...``).

Registered through the ``scrapy.commands`` entry point of the installed package; a project
may also name this package in ``COMMANDS_MODULE = "scrapy_whittle.scrapy.commands"``.
"""
