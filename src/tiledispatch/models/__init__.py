"""Shipped cost models: <arch>/<op>_<direction>_<dtype>/{model.txt, meta.json} (see select/cost_model.py)."""
