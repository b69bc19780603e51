"""Files: atomic writes (:mod:`csg.io.atomic`) and reading a run directory as data, never code
(:mod:`csg.io.trust`)."""
