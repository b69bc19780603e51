"""The UCI regression benchmark (``make uci-regression``): :mod:`~csg.studies.uci.study` runs it,
:mod:`~csg.studies.uci.report` writes its table beside the published numbers."""
