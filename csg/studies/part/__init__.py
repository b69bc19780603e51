"""Sampling part of a pretrained network (the last layer, low-rank adapters) against the whole network and SGD:
``make part-sampling`` (:mod:`csg.studies.part.study` runs it, :mod:`csg.studies.part.report` tabulates it)."""
