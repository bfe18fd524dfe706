"""The cost model (the `ml` selection strategy): features of (problem, config) pairs, a LightGBM model per
(arch, op, direction, dtype), training from sweep datasets and validation on held-out problems. Importing this
package does no work; pandas, numpy and lightgbm are imported inside the functions that need them."""
