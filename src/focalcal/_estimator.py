"""The base of every calibrator of :mod:`focalcal.posthoc`: scikit-learn's estimator protocol
(``get_params`` / ``set_params``, fitted attributes, tags, ``classes_``) on a :class:`torch.nn.Module`,
and the ``NotFittedError`` it raises (scikit-learn's subclass where scikit-learn is importable,
made on first use so that importing the library never imports scikit-learn).

Not API: the calibrators and ``NotFittedError`` are :mod:`focalcal.posthoc`'s.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

import numpy as np
import torch

from ._validation import ArrayLike, check_logits

__all__ = ["_Calibrator", "not_fitted_error"]


def _not_fitted_bases() -> tuple[type, ...]:
    """scikit-learn's ``NotFittedError`` where it is importable, else what it derives from."""
    try:
        from sklearn.exceptions import NotFittedError as SklearnNotFittedError
    except ImportError:
        return (ValueError, AttributeError)
    return (SklearnNotFittedError,)


def not_fitted_error() -> type[Exception]:
    """``focalcal.posthoc.NotFittedError``, made on first use (so that importing the library never
    imports scikit-learn, whose import costs about a second) and kept in this module's namespace."""
    cls = globals().get("NotFittedError")
    if cls is None:
        cls = type("NotFittedError", _not_fitted_bases(), {"__module__": "focalcal.posthoc", "__doc__": _NOT_FITTED_DOC})
        globals()["NotFittedError"] = cls
    return cls


_NOT_FITTED_DOC = """Raised when a calibrator is used before ``fit``.

    A ``ValueError`` and an ``AttributeError``; where scikit-learn is importable, a subclass of
    ``sklearn.exceptions.NotFittedError`` (which is both), so ``except NotFittedError`` clauses
    written for scikit-learn catch it.

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import NotFittedError, TemperatureScaling
    >>> try:
    ...     TemperatureScaling().predict_proba(torch.zeros(1, 3))
    ... except NotFittedError as err:
    ...     print(type(err).__name__, isinstance(err, ValueError), isinstance(err, AttributeError))
    NotFittedError True True
    >>> from sklearn.exceptions import NotFittedError as SklearnNotFittedError
    >>> issubclass(NotFittedError, SklearnNotFittedError)
    True
    """


_C = TypeVar("_C", bound="_Calibrator")


class _Calibrator(torch.nn.Module):
    """Shared plumbing: the estimator API, fitted-state bookkeeping, predict-time checks, state_dict.

    scikit-learn's estimator rules: ``__init__`` stores each argument unchanged under its own name
    and checks it through :meth:`_validate_params`, which writes the checked forms to private
    attributes that the fit uses; :meth:`get_params` reads the names from ``__init__``'s
    signature, so ``sklearn.base.clone`` rebuilds an unfitted copy.
    """

    _fitted_names: tuple[str, ...] = ()

    def _validate_params(self) -> None:
        """Check the public constructor parameters; store their checked forms privately."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return sorted(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters as passed, by name (scikit-learn's estimator API).

        ``deep`` is accepted for compatibility; no parameter is itself an estimator.
        """
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self: _C, **params: Any) -> _C:
        """Set constructor parameters by name, check them as ``__init__`` does, and return ``self``.

        An unknown name or an invalid value raises ``ValueError`` and leaves the parameters as they
        were. A fitted calibrator keeps its fitted attributes until the next ``fit``.
        """
        valid = self._get_param_names()
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise ValueError(f"invalid parameter(s) {', '.join(map(repr, unknown))} for "
                             f"{type(self).__name__}; valid parameters: {', '.join(valid)}")
        old = {name: getattr(self, name) for name in params}
        for name, value in params.items():
            setattr(self, name, value)
        try:
            self._validate_params()
        except ValueError:
            for name, value in old.items():
                setattr(self, name, value)
            self._validate_params()
            raise
        return self

    def _require_fitted(self) -> None:
        if not getattr(self, "_is_fitted", False):
            raise not_fitted_error()(
                f"This {type(self).__name__} instance is not fitted yet. Call "
                f"'fit(logits, labels)' on held-out data before 'predict_proba' or 'forward'.")

    def _check_predict_logits(self, logits: ArrayLike) -> torch.Tensor:
        z = check_logits(logits, "logits")
        k = getattr(self, "n_classes_", None)
        if k is not None and z.shape[-1] != k:
            raise ValueError(f"logits have {z.shape[-1]} classes in their last dimension but the "
                             f"calibrator was fitted on {k}")
        return z

    def predict_proba(self, logits: ArrayLike) -> torch.Tensor | np.ndarray:
        """Calibrated probabilities, shape ``(..., K)``; rows sum to 1.

        In the array type and dtype of ``logits``: a Tensor for a Tensor (on its device, with its
        autograd graph), a NumPy array for anything else (NumPy in, NumPy out, as scikit-learn
        expects). Subclasses implement :meth:`forward` (log-probabilities as a Tensor).
        """
        probs = torch.exp(self.forward(logits))
        if isinstance(logits, torch.Tensor):
            return probs
        return probs.detach().cpu().numpy()

    # ------------------------------------------------- scikit-learn's estimator protocol ---
    # (without importing scikit-learn: it calls these, so it is importable when they run)

    #: scikit-learn < 1.6 reads the estimator type here, later versions from __sklearn_tags__
    _estimator_type = "classifier"

    def __sklearn_is_fitted__(self) -> bool:
        """Whether ``fit`` has run (read by ``sklearn.utils.validation.check_is_fitted``)."""
        return bool(getattr(self, "_is_fitted", False))

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags (1.6 and later): a probabilistic classifier that needs ``fit``."""
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(estimator_type="classifier", target_tags=TargetTags(required=True),
                    classifier_tags=ClassifierTags(), requires_fit=True)

    @property
    def classes_(self) -> np.ndarray:
        """The class indices ``0, ..., n_classes_ - 1`` (the columns of ``predict_proba``)."""
        self._require_fitted()
        return np.arange(self.n_classes_)

    def get_extra_state(self) -> dict[str, object]:
        """The fitted attributes, saved in ``state_dict()`` beside the parameters."""
        state = {"_is_fitted": getattr(self, "_is_fitted", False)}
        for name in self._fitted_names:
            if hasattr(self, name):
                state[name] = getattr(self, name)
        return state

    def set_extra_state(self, state: dict[str, object]) -> None:
        """Restore the fitted attributes saved by :meth:`get_extra_state`.

        Raises
        ------
        ValueError
            ``state`` names an attribute this calibrator does not fit (a state of another class,
            or of an older version).
        """
        unknown = sorted(set(state) - {"_is_fitted", *self._fitted_names})
        if unknown:
            raise ValueError(f"state names attributes that {type(self).__name__} does not fit: {unknown}; "
                             f"it fits {sorted(self._fitted_names)}")
        for name, value in state.items():
            setattr(self, name, value)
