"""Reproductions of the papers' numerical examples (``python -m sim.experiments --help``).

* ``icc2021``: the two examples of *Deep Reinforcement Learning for Web Crawling* (ICC 2021),
  one page per group and groups of (5, 80, 10, 5) pages, for uniform, static, thompson, dqn,
  whittle and the oracle policy as a reference;
* ``allerton2019``: Table I, stochastic, M = 1 (*A learning algorithm for the Whittle index
  policy for scheduling web crawlers*, Allerton 2019): lspe against the oracle,
  whittle and thompson-whittle;
* ``dqn-timing``: milliseconds of one FG-DQN training step and one decision.
"""
