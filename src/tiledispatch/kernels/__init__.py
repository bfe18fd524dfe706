"""Kernel families: each module renders Triton source for a config, plans its launches and owns its rules.

kernels/family.py says which module builds a config and gives the validity predicates every caller uses.
"""
