"""ablate: controlled ablation studies of the choices inside RL fine-tuning of language models.

Run ``ablate --help`` for the commands; see README.md for the two commands a newcomer needs. From Python
(docs/api.md)::

    import ablate
    res = ablate.load("reports/loss_normalization")   # a committed report: trials, curves, claims, figures
    res.claims

``validate``, ``plan_seeds``, ``run`` and ``load`` are :mod:`ablate.api`'s; they are imported on first use, so
``import ablate`` (and the command line) stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["AblateError", "StudyError", "StudyResults", "load", "plan_seeds", "run", "validate"]

if TYPE_CHECKING:
    from ablate.api import AblateError, StudyError, StudyResults, load, plan_seeds, run, validate


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ablate import api

        return getattr(api, name)
    raise AttributeError(f"module 'ablate' has no attribute {name!r}")
