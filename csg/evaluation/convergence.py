"""ArviZ's convergence diagnostics of many variables at once: the rank-normalised split R-hat and the bulk, tail and
mean effective sample sizes (Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021), for draws of shape
``(chains, draws, *variables)``.

Why not ``arviz.rhat`` / ``arviz.ess`` directly: ArviZ computes them one variable at a time in a Python loop, which
costs seconds per thousand variables (the NUTS reference network's 10 000 test probabilities: 19 s for one
reference at 2 x 20 draws). These are the same formulas, transcribed from ArviZ 0.23's ``_rhat_rank``, ``_ess``,
``_ess_bulk``, ``_ess_tail`` and ``_ess_mean`` and run on every variable as one numpy array (the Geyer sequences'
loops over lags stay, vectorised over the variables); tests/evaluation/test_convergence.py holds them equal to
ArviZ on draws built to reach every branch (ties, constants, NaN, too few draws, the sequences' stops).

- R-hat: each chain split in halves; ranks of all draws of a variable (ties averaged), z = Phi^{-1}((r - 3/8) /
  (S + 1/4)); the classic R-hat of z (bulk) and of the folded draws ``|theta - median|`` so transformed (tail); their
  maximum. NaN with fewer than 2 chains or 4 draws, or a NaN draw.
- ESS: Geyer's initial positive then monotone sequence of the chains' mean autocorrelation (FFT autocovariance),
  tau = -1 + 2 sum rho_t, ESS = chains x draws / max(tau, 1 / log10(chains x draws)); ``bulk`` on the rank-normalised
  split chains, ``tail`` the smaller of the ESS of the indicators theta <= q_0.05 and theta <= q_0.95 (type-7
  quantiles), ``mean`` on the split chains. A variable that does not vary has ESS = its number of draws.
"""

from __future__ import annotations

import numpy as np

__all__ = ["autocorrelation", "ess", "rank_rhat"]


def _flat(draws) -> tuple[np.ndarray, tuple[int, ...]]:
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim < 2:
        raise ValueError(f"draws of shape (chains, draws, *variables), not {draws.shape}")
    return draws.reshape(draws.shape[0], draws.shape[1], -1), draws.shape[2:]


def _split(x: np.ndarray) -> np.ndarray:
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half:]], axis=0)


def _z_scale(x: np.ndarray) -> np.ndarray:
    from scipy import stats

    chains, draws, count = x.shape
    ranks = stats.rankdata(x.reshape(chains * draws, count), method="average", axis=0)
    size = chains * draws
    return stats.norm.ppf((ranks - 3 / 8) / (size - 2 * 3 / 8 + 1)).reshape(x.shape)


def _rhat(x: np.ndarray) -> np.ndarray:
    draws = x.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        between = draws * np.var(x.mean(axis=1), axis=0, ddof=1)
        within = np.var(x, axis=1, ddof=1).mean(axis=0)
        return np.sqrt((between / within + draws - 1) / draws)


def rank_rhat(draws) -> np.ndarray:
    """The rank-normalised split R-hat of every variable of ``draws`` ``(chains, draws, *variables)``: an array of
    shape ``variables`` (ArviZ's ``rhat(method="rank")``)."""
    x, shape = _flat(draws)
    if x.shape[0] < 2 or x.shape[1] < 4:
        return np.full(shape, np.nan)
    split = _split(x)
    bulk = _rhat(_z_scale(split))
    tail = _rhat(_z_scale(np.abs(split - np.median(split.reshape(-1, split.shape[2]), axis=0))))
    result = np.where(tail > bulk, tail, bulk)
    return np.where(np.isnan(x).any(axis=(0, 1)), np.nan, result).reshape(shape)


def ess(draws, method: str = "bulk") -> np.ndarray:
    """The effective sample size of every variable of ``draws`` ``(chains, draws, *variables)`` by ``method``
    (``bulk``, ``tail`` or ``mean``): an array of shape ``variables`` (ArviZ's ``ess(method=...)``)."""
    x, shape = _flat(draws)
    if x.shape[1] < 4:
        return np.full(shape, np.nan)
    if method == "bulk":
        found = _ess(_z_scale(_split(x)))
    elif method == "mean":
        found = _ess(_split(x))
    elif method == "tail":
        low, high = (_ess(_split((x <= np.quantile(x.reshape(-1, x.shape[2]), q, axis=0)).astype(np.float64)))
                     for q in (0.05, 0.95))
        found = np.where(high < low, high, low)
    else:
        raise ValueError(f"method {method!r}: one of bulk, tail, mean")
    return np.where(np.isnan(x).any(axis=(0, 1)), np.nan, found).reshape(shape)


def autocorrelation(series) -> np.ndarray:
    r"""The autocorrelation of every variable of ``series`` ``(draws, *variables)`` at every lag, an array of the same
    shape: :math:`\rho_t = \hat\gamma_t / \hat\gamma_0` with :math:`\hat\gamma_t = \frac1n \sum_{i=1}^{n-t}
    (x_i - \bar x)(x_{i+t} - \bar x)` (the biased autocovariance, by FFT; ArviZ 0.x's ``autocorr``, which ArviZ 1.x
    no longer has at the top level). NaN where a variable does not vary."""
    x = np.asarray(series, dtype=np.float64)
    if x.ndim < 1 or x.shape[0] < 1:
        raise ValueError(f"series of shape (draws, *variables), not {x.shape}")
    flat = x.reshape(1, x.shape[0], -1)
    acov = _autocov(flat)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return (acov / acov[:1]).reshape(x.shape)


def _autocov(x: np.ndarray) -> np.ndarray:
    from scipy.fft import next_fast_len

    draws = x.shape[1]
    centred = x - x.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(centred, n=next_fast_len(2 * draws), axis=1)
    spectrum *= np.conjugate(spectrum)
    return np.fft.irfft(spectrum, n=next_fast_len(2 * draws), axis=1)[:, :draws] / draws


def _ess(x: np.ndarray) -> np.ndarray:
    """ArviZ's ``_ess`` of each variable of ``x`` ``(chains, draws, variables)``."""
    chains, draws, count = x.shape
    columns = np.arange(count)
    with np.errstate(divide="ignore", invalid="ignore"):
        acov = _autocov(x).mean(axis=0)  # (draws, variables): the chains' mean autocovariance at each lag
        mean_var = acov[0] * draws / (draws - 1.0)
        var_plus = mean_var * (draws - 1.0) / draws
        if chains > 1:
            var_plus = var_plus + np.var(x.mean(axis=1), axis=0, ddof=1)
        rho = np.zeros((draws, count))
        rho[0] = 1.0
        even, odd = np.ones(count), 1.0 - (mean_var - acov[1]) / var_plus
        rho[1] = odd
        active, end = np.ones(count, dtype=bool), np.ones(count, dtype=int)
        t = 1
        while t < draws - 3:  # Geyer's initial positive sequence, each variable until its pair sum is <= 0
            active &= (even + odd) > 0.0
            if not active.any():
                break
            e, o = 1.0 - (mean_var - acov[t + 1]) / var_plus, 1.0 - (mean_var - acov[t + 2]) / var_plus
            even, odd = np.where(active, e, even), np.where(active, o, odd)
            keep = active & (e + o >= 0)
            rho[t + 1], rho[t + 2] = np.where(keep, e, rho[t + 1]), np.where(keep, o, rho[t + 2])
            end = np.where(active, t + 2, end)
            t += 2
        max_t = end - 2
        improve = even > 0
        rho[max_t[improve] + 1, columns[improve]] = even[improve]
        for t in range(1, int(max_t.max(initial=0)) - 1, 2):  # Geyer's initial monotone sequence
            lower = (t <= max_t - 2) & (rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t])
            mean = (rho[t - 1] + rho[t]) / 2.0
            rho[t + 1], rho[t + 2] = np.where(lower, mean, rho[t + 1]), np.where(lower, mean, rho[t + 2])
        lags = np.arange(draws)[:, None]
        after = np.where(max_t + 1 < draws, rho[np.minimum(max_t + 1, draws - 1), columns], 0.0)
        tau = -1.0 + 2.0 * np.where(lags <= max_t, rho, 0.0).sum(axis=0) + after
        total = chains * draws
        found = total / np.maximum(tau, 1 / np.log10(total))
    found = np.where(np.isnan(rho).any(axis=0), np.nan, found)
    return np.where(x.max(axis=(0, 1)) - x.min(axis=(0, 1)) < np.finfo(float).resolution, float(total), found)
