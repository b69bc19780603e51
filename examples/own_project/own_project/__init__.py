"""A small user project run by csg's train.py: its own data set, network and sampler (see ../README.md)."""
