"""csg inside other frameworks' loops: :mod:`csg.integrations.lightning` (the ``lightning`` extra)."""
