"""Paired bootstrap of one benchmark's leaderboard cells.

Instances are resampled within each stratum (a run-name group such as ``med_dialog,subset=icliniq``),
with the *same* draws for every model, because models answer the same instances: differences between
models are then measured on identical resamples. A cell's replicate is the mean over strata of the
resampled stratum means, mirroring the point estimate (macro over runs, micro within a run).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from medhelm.store.leaderboard import nanmean

_BLOCK_ELEMENTS = 2_000_000  # bound the (replicates x instances) count matrix to ~16 MB at a time


def stream_seed(seed: int, *keys: str) -> np.random.Generator:
    """A generator that depends only on the seed and the stratum's name, not on processing order."""
    h = int.from_bytes(hashlib.sha256("\x1f".join(keys).encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed, h])


def stratum_replicates(values: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """``values[models, instances]`` (NaN = no value) -> resampled means ``[replicates, models]``."""
    m, n = values.shape
    out = np.full((replicates, m), np.nan)
    if n == 0 or replicates == 0:
        return out
    present = ~np.isnan(values)
    filled = np.where(present, values, 0.0)
    mask = present.astype(float)
    block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, replicates, block):
        b = min(block, replicates - start)
        idx = rng.integers(0, n, size=(b, n))
        counts = np.bincount((idx + n * np.arange(b)[:, None]).ravel(), minlength=b * n).reshape(b, n)
        sums = counts @ filled.T  # [b, m]
        cnt = counts @ mask.T
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + b] = np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)
    return out


def cell_estimates(strata: Sequence[np.ndarray], replicates: int, rngs: Sequence[np.random.Generator]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Point values ``[models]`` and replicates ``[replicates, models]`` of one benchmark's cells."""
    points, reps = [], []
    for values, rng in zip(strata, rngs):
        count = (~np.isnan(values)).sum(axis=1)
        points.append(nanmean(values, axis=1))
        r = stratum_replicates(values, replicates, rng)
        r[:, count == 0] = np.nan  # a model without this stratum does not get one by resampling
        reps.append(r)
    point = nanmean(np.stack(points), axis=0)
    rep = nanmean(np.stack(reps), axis=0)
    return point, rep

