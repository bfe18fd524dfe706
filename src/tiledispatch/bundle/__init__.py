"""Deployment bundles: kernels compiled ahead of time (on any machine) with the presets, cost models and
tuning entries they need, verified and loaded on a GPU machine so that nothing compiles there."""
