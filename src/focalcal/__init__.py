"""focalcal: focal loss, temperature scaling and properness.

Modules, one job each:

- :mod:`focalcal.maps`      the focal calibration map and the functions of the theory
- :mod:`focalcal.metrics`   calibration and selective-prediction metrics
- :mod:`focalcal.posthoc`   post-hoc calibrators (temperature scaling, focal TS, Psi)
- :mod:`focalcal.losses`    training losses of the five papers
- :mod:`focalcal.lab.data`      synthetic tasks, image datasets, published logits
- :mod:`focalcal.lab.models`    networks that return logits
- :mod:`focalcal.lab.train`     a resumable trainer
- :mod:`focalcal.lab.sweep`     papermill sweeps (local or SLURM)
- :mod:`focalcal_book.verify`    helpers that turn a proposition into an assertion
- :mod:`focalcal.plotting`  the book's shared colours and figure style
"""

__version__ = "0.1.0"
