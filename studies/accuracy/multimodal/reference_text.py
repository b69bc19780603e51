"""What the multimodal study's report says about the network's reference, from the facts that
:func:`studies.accuracy.multimodal.reference.probe` gathered (:func:`report_lines`).
"""

from __future__ import annotations

import math

import numpy as np

from studies.accuracy.multimodal.acceptance import AGREEMENT, CHECK_SE_MAX, KHAT_LIMIT, KHAT_MAX, WEIGHT_SE_MAX


def _shares(values, errors) -> str:
    return ", ".join(f"{v:.3f} +- {e:.{3 if e >= 0.001 else 4}f}" for v, e in zip(values, errors))


def _span(values, digits: int = 1) -> str:
    low, high = min(values), max(values)
    return f"{low:+.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:+.{digits}f} to {high:+.{digits}f}"


def report_lines(facts: dict) -> list[str]:
    """What the study's report says about the network (module docstring), from the probe's facts."""
    low, high = facts["landscapes"][0], facts["landscapes"][-1]

    def span(landscape):
        values = [v for b in landscape["barriers"] for v in (b["from_first"], b["from_second"])]
        return f"{min(values):.2f} to {max(values):.2f}"

    nuts, pt, shares, check = facts["nuts"], facts["tempering"], facts["importance"], facts["smc"]
    first, second = shares["laplace"], shares["tempering"]
    chosen = shares[shares["reference"]]
    stays = ", ".join(f"{n['stay_share']:.2f}" for n in nuts)
    rhats = ", ".join(f"{n['rhat_max']:.2f}" for n in nuts)
    halves = "; ".join(", ".join(f"{w:.2f}" for w in pt[key]) for key in ("first_half", "second_half"))
    pt_z = max(abs(w - r) / e for w, r, e in zip(pt["weights"], chosen["weights"], pt["weights_se"]))
    which, other = ("(1)", "(2)") if shares["reference"] == "laplace" else ("(2)", "(1)")
    delta = max(max(r["weights_se_delta"] + r["core_exact_se_delta"]) for r in (first, second))
    evidence = np.array(check["log_evidence"])
    stages = f"{min(check['stages'])}" + (f" to {max(check['stages'])}" if max(check["stages"]) > min(check["stages"]) else "")
    failed = [f"the two importance estimates differ by {shares['difference']:.3f}"] if shares["difference"] > AGREEMENT else []
    failed += [f"an importance s.e. is {shares['se_max']:.3f}"] if shares["se_max"] > WEIGHT_SE_MAX else []
    failed += [f"k-hat {chosen['khat']:.2f}"] if chosen["khat"] >= KHAT_MAX else []
    failed += [f"the other k-hat {shares['khat_max']:.2f}"] if shares["khat_max"] >= KHAT_LIMIT else []
    failed += [f"the check's s.e. is {max(check['weights_se']):.3f}"] if max(check["weights_se"]) > CHECK_SE_MAX else []
    failed += [f"the check differs from the reference by {check['difference']:.3f}"] if check["difference"] > AGREEMENT else []
    verdict = (f"The reference is {which}, whose k-hat is below {KHAT_MAX}; {other}, k-hat below {KHAT_LIMIT:g} (a finite "
               f"mean of the weights, a consistent estimate), and the SMC check (s.e. at most {CHECK_SE_MAX}) agree "
               f"with it within {AGREEMENT} on every mode weight: the study scores the network's chains against it."
               if facts["accepted"] else
               f"A reference needs the two importance estimates within {AGREEMENT}, every s.e. at most "
               f"{WEIGHT_SE_MAX}, one k-hat below {KHAT_MAX} and both below {KHAT_LIMIT:g}, and the SMC check, of s.e. "
               f"at most {CHECK_SE_MAX}, within {AGREEMENT} on every mode weight; here {', '.join(failed)}: no "
               "reference is accepted, and the network joins no verdict of this report.")
    return [f"The 1-2-1 tanh network (`make reference-multimodal`, {facts['seconds']:.0f} s): at the data noise "
            f"s = {low['noise']} the minimum-energy paths between its {len(low['energies'])} main minima climb "
            f"{span(low)} nats, too little to trap a chain; at s = {high['noise']} those between its "
            f"{len(high['energies'])} main minima ({high['minima_found']} minima found in all) climb {span(high)} "
            "nats, real barriers. A point's mode is the main minimum whose Laplace fit gives it the highest density, "
            "its core that fit's 99 % ellipsoid (the chains' rule).",
            "",
            f"Two samplers that an MCMC reference would rest on fail here. NUTS started at each main minimum "
            f"({facts['settings']['nuts_chains']} chains each) neither stays nor mixes: {stays} of its draws lie "
            f"nearest the minimum it started at, R-hat {rhats}. Parallel tempering ({pt['runs']} runs of "
            f"{pt['iterations']:,} iterations) gives the weights {_shares(pt['weights'], pt['weights_se'])} (s.e. over "
            f"the runs; up to {pt_z:.1f} s.e. from the reference below), but its cold chains are still drifting (the "
            f"weights of the first and of the second half of the kept draws: {halves}).",
            "",
            "In 7 dimensions importance sampling is exact in the limit; heavy-tailed weights show in the Pareto k-hat "
            "(PSIS). Two proposals of one family (mixtures of Student-t densities fitted by EM, with a defensive "
            f"component as wide as the prior), adapted from different information, each {first['draws']:,} draws, "
            f"with s.e. from {first['batches']} independent batches of the draws (with a k-hat above 0.5 the weights' "
            f"variance is infinite: the delta method's s.e., at most {delta:.4f}, are not valid, and the batches' "
            "spread may understate the error too): (1) from the "
            "minima (Student-t at each, annealed adaptation through tempered posteriors, 1/30 to 1): mode weights "
            f"{_shares(first['weights'], first['weights_se'])}, core shares and outside every core "
            f"{_shares(first['core_exact'], first['core_exact_se'])}, k-hat {first['khat']:.2f}, Kish ESS "
            f"{first['ess']:,.0f}; (2) fitted to parallel tempering's cold draws, nothing of the minima: weights "
            f"{_shares(second['weights'], second['weights_se'])}, core shares "
            f"{_shares(second['core_exact'], second['core_exact_se'])}, k-hat {second['khat']:.2f}, ESS "
            f"{second['ess']:,.0f}. They differ by at most {shares['difference']:.3f} ({_span(shares['z'])} joint s.e. "
            "on the 7 shares" + ("; more than their s.e. allow, so at least one s.e. is optimistic" if max(map(abs, shares["z"])) > 2 else "")
            + "). Their agreement checks the adaptation, not the family: a region that both miss would be missed alike.",
            "",
            f"The check of another kind is tempered sequential Monte Carlo: {check['runs']} independent runs of "
            f"{check['particles']:,} particles that start as prior draws and follow the tempered path to the posterior "
            f"({stages} stages, each keeping an ESS of {facts['settings']['smc_ess']} of the particles), resampled and "
            "moved by Metropolis-Hastings: random walks scaled by the particles' own clusters, and independence jumps "
            "between the minima's Laplace fits, which leave every tempered posterior invariant and enter no weight. "
            f"Mode weights {_shares(check['weights'], check['weights_se'])}, core shares and outside every core "
            f"{_shares(check['core_exact'], check['core_exact_se'])} (s.e. over the runs), log evidence "
            f"{evidence.mean():.2f} +- {evidence.std(ddof=1) / math.sqrt(len(evidence)):.2f} (importance sampling: "
            f"{first['log_evidence']:.2f}, {second['log_evidence']:.2f}). It lies within {check['difference']:.3f} of "
            f"the reference on every mode weight ({_span(check['z'])} joint s.e.). " + verdict]
