#!/usr/bin/env bash
# Every committed report that the shared statistics write, rewritten from the committed CSVs (no run):
# what a change to csg/evaluation/comparison.py must be followed by. Run from the repository root.
set -euo pipefail
make accuracy-report accuracy-multimodal-report icsgld-variance-report icsgld-bandit-report icsgld-sim-report \
  table5-report part-sampling-report demo-seeds-report
make icsgld-bandit-report table1-report table2-report table3-report icsgld-table1-report SCALE=smoke
.venv/bin/python scripts/reproduce.py icsgld-sim --report-only --out results/icsgld/simulation-pilot100k
