#!/usr/bin/env bash
# Every committed report that gives verdicts, rewritten from its committed CSVs (no run): what a change to the
# shared statistics (csg/evaluation/comparison.py) must be followed by. `make reports` runs it; so does
# tests/studies/test_committed_reports.py, in a copy of the checkout, which then finds every file as committed.
# Run from the repository root; PYTHON: the interpreter (default .venv/bin/python).
set -euo pipefail
PYTHON="${PYTHON:-.venv/bin/python}"
reproduce() { "$PYTHON" scripts/reproduce.py "$@" --report-only; }
for target in accuracy accuracy-multimodal icsgld-variance icsgld-bandit icsgld-sim table5 part-sampling uci-regression \
    posterior-benchmark; do
  reproduce "$target"
done
for target in icsgld-bandit table1 table2 table3 icsgld-table1; do
  reproduce "$target" --scale smoke
done
reproduce icsgld-sim --out results/icsgld/simulation-pilot100k
"$PYTHON" scripts/demo_report.py --from-csv --arms --out results/demo.md --csv results/demo.csv \
  --restarts-csv results/demo_restarts.csv --probes results/demo_t1_probes.csv --long results/demo_long.csv \
  --command "make demo-seeds"
