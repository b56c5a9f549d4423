"""The length estimator: per-group output-length estimates from finished siblings."""

from actors.estimator.core import LengthEstimator, UnknownGroupError
from actors.estimator.options import EstimatorOptions

__all__ = ["EstimatorOptions", "LengthEstimator", "UnknownGroupError"]
