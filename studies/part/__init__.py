"""Sampling part of a pretrained network (the last layer, low-rank adapters) against the whole network and SGD:
``make part-sampling`` (:mod:`studies.part.study` runs it, :mod:`studies.part.report` tabulates it)."""
