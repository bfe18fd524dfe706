"""Shipped cost models: <arch>/<op>_<direction>_<dtype>/{model.txt.gz, meta.json} (see select/cost_model.py)."""
