"""csg-evaluate: evaluate the samples of a finished run again, without training (in a clone, the same as
python scripts/evaluate_run.py).

    csg-evaluate RUN_DIR [--trust-code] [--partial] [--reference FILE] [KEY=VALUE ...]
    csg-evaluate runs/2026-11-22/10-00-00_csghmc_mnist5k_seed0 evaluation.cycle_weights=harmonic

--reference FILE (= evaluation.reference=FILE): score the ensemble's predictive against a reference posterior's
(a .npz of test_probs, test_labels and optionally ood_probs, as make reference-network writes): top-1 agreement
and total variation, in the printed table and in the written file's "reference".

Overrides are key=value pairs applied to the run's saved config (RUN_DIR/.hydra/config.yaml). Only what
changes how the samples are evaluated may be overridden, and only keys the saved config has:
  evaluation.*            evaluation.cycle_weights=equal|harmonic, evaluation.ece_bins=N
  trainer.device          auto, cpu, cuda, cuda:N, mps;  trainer.precision: 32, bf16-mixed, 16-mixed
  data.eval_batch_size, data.num_workers, data.device_resident
  data.root, data.download   where the run's data set is read from (when it has moved)
  ood=<name>              an out-of-distribution set (configs/ood/<name>.yaml: none, notmnist, fashion_mnist, svhn)
  ood.*                   its settings (ood.root=..., ood.download=...)
The keys that made the samples (data=/data.name, model.*, sampler.*, seed, trainer.epochs, ...) are
refused: evaluating the samples as something they are not would give wrong numbers. Values are checked as
train.py checks them. Every sample file is checked (complete, a sample of the run's model) before any is
used; a bad input is a one-line `error:` (exit status 2) and writes nothing.

The run directory is read as data: its files as weights-only tensors, its config as YAML within size and alias
limits, and only csg's own components are built (by name). A config that names a `_target_` (your own model, data
set or sampler), a data root inside the run directory, or CIFAR's pickled batches from a root the run names
(give your own: data.root=...) is refused before anything is imported, called or unpickled, unless you pass
--trust-code (as Hugging Face's trust_remote_code): only for your own runs and run directories you trust.

Writes evaluation_<cycle_weights>.json into the run directory (atomically) and prints the table.

A run that has not finished (no metrics.json: still training, killed, preempted) is refused, as
csg.Posterior.load refuses it. --partial evaluates the samples its manifests (samples/manifest.json) record so
far instead, and writes evaluation_partial_<time>.json; the table's first line says PARTIAL.
"""

from __future__ import annotations

import sys

from csg.errors import ConfigError
from csg.launch.cli import run_or_exit


def _reference_flag(words: list[str]) -> list[str]:
    """``--reference FILE`` (or ``--reference=FILE``) as the override ``evaluation.reference=FILE``."""
    out, index = [], 0
    while index < len(words):
        word = words[index]
        if word == "--reference" or word.startswith("--reference="):
            value = word.partition("=")[2] if "=" in word else (words[index + 1] if index + 1 < len(words) else "")
            if not value or value.startswith("-"):
                raise ConfigError("--reference", value or None, "the path of a reference .npz file: --reference FILE")
            out.append(f"evaluation.reference={value}")
            index += 1 if "=" in word else 2
            continue
        out.append(word)
        index += 1
    return out


def main(argv: list[str]) -> None:
    if argv and argv[0] in {"-h", "--help"}:
        print(__doc__)
        raise SystemExit(0)

    def evaluate():
        from csg.posterior.evaluate import evaluate_run, format_metrics

        trust_code, partial = "--trust-code" in argv, "--partial" in argv
        words = [arg for arg in argv if arg not in ("--trust-code", "--partial")]
        words = _reference_flag(words)
        if not words:
            raise ConfigError("run_dir", None, "a run directory of train.py: csg-evaluate RUN_DIR "
                              "[--trust-code] [KEY=VALUE ...] (--help)")
        options = [arg for arg in words if arg.startswith("-")]
        if options:
            name, _, value = options[0].partition("=")
            raise ConfigError(name, value or True, "no option but --help, --trust-code, --partial and --reference: "
                              "RUN_DIR [--trust-code] [--partial] [--reference FILE] [KEY=VALUE ...]")
        return format_metrics(evaluate_run(words[0], words[1:], trust_code=trust_code, partial=partial))

    print(run_or_exit(evaluate))


def console() -> None:
    """The ``csg-evaluate`` command of the installed package."""
    main(sys.argv[1:])
