"""Checking a command before anything runs: every job's keys and values (:mod:`csg.checks.preflight`) and
each config's values (:mod:`csg.checks.config`)."""
