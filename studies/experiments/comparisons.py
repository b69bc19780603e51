"""The comparisons section of a paper table or figure: the comparisons its paper makes, with their statistics.

A table lists mean +- s.e. per method; whether one method beats another is a separate question, which this
module answers for the comparisons the paper makes (its :class:`Claim`\\ s, defined with the table). Runs of two
methods with the same ``seed`` share the model's initialisation, the order of the mini-batches and the seed of
the sampler's noise (:func:`csg.engine.build.seed_streams`) and are evaluated on the same test set, so each comparison is
paired by seed. Every comparison of one report is one family: :func:`csg.evaluation.comparison.compare_paired`
gives the differences (method - baseline), their simultaneous intervals (compatible with Holm's test across the
family) and the verdicts (helps, hurts, equivalent by two one-sided tests inside the metric's stated margin, else
inconclusive) and the smallest difference each could detect.
With one seed there is no interval: the section says "one seed: an ordering, not a verdict" and names no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, interval_text, method_statement, tally, verdict_frame
from csg.reporting import markdown_table

ONE_SEED = "one seed: an ordering, not a verdict"
PAIRED = ("Paired by seed: the runs of two methods with one seed share the model's initialisation, the order of the "
          "mini-batches and the seed of the noise, and are scored on the same test set.")


@dataclass(frozen=True)
class Claim:
    """A comparison the paper makes: row ``method`` against row ``baseline`` on each of ``metrics`` (the
    metrics' ``paper_name``)."""

    method: str
    baseline: str
    metrics: tuple[str, ...]


def compare(runs: pd.DataFrame, claims: Sequence[Claim], metrics: Sequence, group: str = "data") -> pd.DataFrame:
    """One row per (``group``, claim, metric) whose two methods both have runs, every row one family.

    ``runs``: one row per run, columns ``group``, ``method``, ``seed`` and one per metric's ``paper_name``
    (``num_test`` too where a metric's margin is per test example). ``metrics``: objects with ``paper_name``,
    ``lower_is_better``, ``margin`` (``nan``: none) and ``per_example`` (the metric is summed over the test set
    and its margin is per test example). Columns: ``group``, metric, method, baseline, seeds (those paired),
    method_mean and baseline_mean over the paired seeds, and the columns of
    :func:`~csg.evaluation.comparison.verdict_frame`."""
    by_name = {metric.paper_name: metric for metric in metrics}
    keys, pairs = [], []
    if runs.empty:
        return pd.DataFrame()
    for value in dict.fromkeys(runs[group]):
        block = runs[runs[group] == value]
        for claim in claims:
            for name in claim.metrics:
                metric = by_name[name]
                method = block[block.method == claim.method].groupby("seed")[name].mean()
                baseline = block[block.method == claim.baseline].groupby("seed")[name].mean()
                both = method.dropna().index.intersection(baseline.dropna().index).sort_values()
                if not len(both):
                    continue
                margin = metric.margin
                if getattr(metric, "per_example", False):
                    margin *= float(block[block.method.isin([claim.method, claim.baseline])].num_test.iloc[0])
                keys.append({group: value, "metric": name, "method": claim.method, "baseline": claim.baseline,
                             "seeds": " ".join(str(int(s)) for s in both),
                             "method_mean": float(method[both].mean()), "baseline_mean": float(baseline[both].mean())})
                pairs.append(Paired(method[both].to_numpy(float), baseline[both].to_numpy(float), margin=margin,
                                    lower_is_better=metric.lower_is_better))
    if not pairs:
        return pd.DataFrame()
    return pd.concat([pd.DataFrame(keys), verdict_frame(compare_paired(pairs))], axis=1)


def _number(value: float, digits: int) -> str:
    if not math.isfinite(value):
        return "-"
    return "0" if value == 0 else f"{value:+.{digits}f}"  # 0: a compatible interval's bound at a rejection


def markdown(frame: pd.DataFrame, metrics: Sequence, claims_text: str, group: str = "data",
             heading: str = "## Comparisons") -> list[str]:
    """The section's lines: what the paper claims, how the verdicts are reached (margins, the family), and one
    row per comparison; with one seed per comparison, the differences only, under :data:`ONE_SEED`.

    ``metrics``: as for :func:`compare`, with ``label``, ``digits`` and ``margin_note`` (why that margin)."""
    lines = [heading, "", claims_text + " " + PAIRED, ""]
    if frame.empty:
        return lines + ["No comparison has runs of both its methods.", ""]
    by_name = {metric.paper_name: metric for metric in metrics}
    used = [by_name[name] for name in dict.fromkeys(frame.metric)]
    one_seed = bool((frame.n < 2).all())
    if one_seed:
        lines += [f"**{ONE_SEED[0].upper() + ONE_SEED[1:]}.** Each method has one run (seed "
                  f"{', '.join(sorted(set(frame.seeds)))}), so a difference has no interval and no test; the table gives "
                  "the differences (method - baseline) and which method is ahead on this seed, nothing more. The "
                  "smallest effect these runs could detect is undefined (no spread between seeds to measure).", ""]
    else:
        margins = "; ".join(f"{m.label} {m.margin:g}{' per test example' if getattr(m, 'per_example', False) else ''}"
                            for m in used if math.isfinite(m.margin))
        lines += [method_statement(margin=margins) + f" The family: the {len(frame)} comparisons below.", ""]
        notes = [f"{m.label}: {m.margin_note}" for m in used if getattr(m, "margin_note", "")]
        if notes:
            lines += ["Equivalence margins, our choice: " + "; ".join(notes) + ".", ""]
        lines += [f"Verdicts: {tally(frame.itertuples())}." + _detectable(frame, used), ""]
    value = "value" if one_seed else "mean"
    header = [group, "metric", "method", "baseline", "seeds", f"method's {value}", f"baseline's {value}", "difference"]
    header += ["ahead on this seed"] if one_seed else ["simultaneous 95 % interval", "detectable", "verdict"]
    rows = []
    for row in frame.itertuples():
        metric = by_name[row.metric]
        digits = metric.digits
        cells = [str(getattr(row, group)), metric.label, row.method, row.baseline, row.seeds,
                 f"{row.method_mean:.{digits}f}", f"{row.baseline_mean:.{digits}f}", _number(row.difference, digits)]
        if one_seed:
            cells.append(_ahead(row, metric))
        elif row.n < 2:
            cells += ["-", "-", "one seed: no verdict"]
        else:
            cells += [interval_text(row.low, row.high, f"+.{digits}f"), f"{row.detectable:.{digits}f}",
                      row.verdict]
        rows.append(cells)
    return lines + markdown_table(header, rows, align="lllllrrr" + ("l" if one_seed else "rrl")) + [""]


def _ahead(row, metric) -> str:
    if row.difference == 0:
        return "tie"
    method_better = (row.difference < 0) == metric.lower_is_better
    return row.method if method_better else row.baseline


def _detectable(frame: pd.DataFrame, metrics: Sequence) -> str:
    """' Smallest detectable difference (80 % power, at the family's level): test error % 0.8-3.1; ...'"""
    parts = []
    for metric in metrics:
        values = frame[(frame.metric == metric.paper_name) & (frame.n >= 2)].detectable.dropna()
        if len(values):
            low, high = values.min(), values.max()
            span = f"{low:.{metric.digits}f}" + (f"-{high:.{metric.digits}f}" if high > low else "")
            parts.append(f"{metric.label} {span}")
    if not parts:
        return ""
    return (" The smallest difference each comparison could detect (80 % power at the family's level; column "
            "'detectable'): " + "; ".join(parts) + ".")
