"""The UCI regression benchmark (``make uci-regression``): :mod:`~studies.uci.study` runs it,
:mod:`~studies.uci.report` writes its table beside the published numbers."""
