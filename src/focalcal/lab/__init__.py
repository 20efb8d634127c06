"""The focalcal lab: data, models, the trainer, papermill sweeps and their results.

Install with ``pip install "focalcal[lab]"``. Modules, one job each:

- :mod:`focalcal.lab.data`     synthetic tasks, image datasets, published logits, loaders
- :mod:`focalcal.lab.models`   networks that return logits
- :mod:`focalcal.lab.io`       atomic writes and checkpoint loading
- :mod:`focalcal.lab.train`    a resumable trainer (:class:`~focalcal.lab.train.Trainer`) and
  the hooks of losses that change during training
- :mod:`focalcal.lab.records`  what the trainer records per epoch
- :mod:`focalcal.lab.sweep`    papermill sweeps (local or SLURM)
- :mod:`focalcal.lab.results`  reading runs, the calibration protocol, tables and figures

The papermill templates are package data in ``focalcal/lab/templates``.
"""

from importlib.util import find_spec

# module name -> distribution name, for every package of the [lab] extra the lab imports
_LAB_REQUIRES = {"torchvision": "torchvision", "pandas": "pandas", "tqdm": "tqdm",
                 "papermill": "papermill", "jupytext": "jupytext", "submitit": "submitit",
                 "matplotlib": "matplotlib"}

_missing = sorted(dist for mod, dist in _LAB_REQUIRES.items() if find_spec(mod) is None)
if _missing:
    raise ImportError(
        f"focalcal.lab needs {', '.join(_missing)}, which the library alone does not install: "
        f'pip install "focalcal[lab]"')
