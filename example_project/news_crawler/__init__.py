"""The example project. With no ``WHITTLE_SOURCES`` it crawls the simulated web of the
repository's ``sim`` package, which the installed scrapy-whittle does not carry (it is the
repository's test bed, not the plugin's): the repository root, two folders up, goes at the end
of ``sys.path``, so ``sim`` is found there while an installed ``scrapy_whittle`` still comes
first. A copy of the project outside the repository (an egg deployed to Scrapyd) has no ``sim``
beside it and crawls the feeds it is given."""

import sys
from pathlib import Path

_REPOSITORY = Path(__file__).resolve().parents[2]
if (_REPOSITORY / "sim" / "__init__.py").is_file() and str(_REPOSITORY) not in sys.path:
    sys.path.append(str(_REPOSITORY))
