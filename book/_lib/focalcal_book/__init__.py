"""Helpers of the focalcal book, not part of the library.

One naming rule: a helper named after a page of the book (``mukhoti_fmnist``, ``when_focal_helps``,
...) holds that page's run tables, figures and verdicts, which another page may reuse; every other
helper is named after the kind of thing it holds and serves several pages.

- :mod:`focalcal_book.verify`     claim ledgers: a proposition becomes an assertion with a verdict
- :mod:`focalcal_book.theory`     symbolic and high-precision checks of the theory chapters
- :mod:`focalcal_book.posterior`  exact reference quantities for focal risk minimisers
- :mod:`focalcal_book.selective`  exact reference quantities for selective classification
- :mod:`focalcal_book.oracles`    the focal-map oracle written from the papers (numpy / mpmath)
- :mod:`focalcal_book.style`      the book's figure style
- :mod:`focalcal_book.evidence`   float64 evidence the theory chapters assert on
- :mod:`focalcal_book.figures`    the figures of the theory chapters
- :mod:`focalcal_book.pages`      glue several values at once; tables for a reader
- ``focalcal_book.printed``       the papers' own numbers, typed once with their source
- ``focalcal_book.released``      tables, verdicts and figures of the released-models pages
- ``focalcal_book.when_focal_helps``, ``mukhoti_fmnist``, ``psi_capacity``, ``fmnist_focal_ts``,
  ``zhou_fmnist``: the run tables, figures and verdicts of the experiment pages of those names
- ``focalcal_book.verdicts``      the experiment pages' verdicts and their rules (paired seeds, seed
  ranges, combining a claim's parts, a seed range in prose)
"""
