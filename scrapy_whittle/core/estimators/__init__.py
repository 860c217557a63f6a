"""Online estimators of the sources' parameters, vectorised over sources.

Each estimator keeps per-source arrays that ``grow`` with the crawl and persist through
``state_dict`` / ``load_state_dict``, starts from a prior (so one observation never yields an
extreme value), exposes ``mean()`` (alias ``get()``) and its uncertainty (``std()``), and
skips garbage inputs, returning a bool ``accepted`` mask (see ``_base``). The formulas and their
derivations are in ``docs/estimators.md``.

* :class:`RateEstimator`: arrival rate Lambda (Gamma-Poisson, feed-window censoring).
* :class:`DecayEstimator`: interest decay mu (weighted log-linear fits, prior half-life).
* :class:`ValueEstimator`: mean base utility xi_bar (or a page's importance): shrinkage mean.
* :class:`ChangeRateEstimator`: change rate lambda of a page from changed bits
  (Cho & Garcia-Molina, ACM TOIT 2003).
* :class:`PushReliability`: the share of a source's new entries its pushes (WebSub) deliver,
  their lateness, and a silent hub.
* :class:`ProfileEstimator`: a source's daily publishing rhythm (a few Fourier harmonics,
  shrunk towards its group's), from publication times.
"""

from scrapy_whittle.core.estimators.change_rate import ChangeRateEstimator, cho_garcia_molina
from scrapy_whittle.core.estimators.decay import DecayEstimator, prior_from_categories
from scrapy_whittle.core.estimators.profile import ProfileEstimator
from scrapy_whittle.core.estimators.push import PushReliability
from scrapy_whittle.core.estimators.rate import RateEstimator
from scrapy_whittle.core.estimators.value import ValueEstimator

__all__ = ["ChangeRateEstimator", "DecayEstimator", "ProfileEstimator", "PushReliability",
           "RateEstimator", "ValueEstimator", "cho_garcia_molina", "prior_from_categories"]
