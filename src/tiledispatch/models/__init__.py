"""Shipped cost models: <arch>/<op>_<direction>_<dtype>/{model.txt.gz, meta.json} (select/cost_model.py)."""
