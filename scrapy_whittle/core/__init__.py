"""The pure core: index maths, bounds, the model's dynamics, policies and estimators.

Numpy arrays in, arrays out; nothing here imports Scrapy, the re-crawl service or ``sim``
(torch only inside the DQN policy).
"""
