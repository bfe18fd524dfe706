"""The one call path of GEMM and convolution: arguments -> problem -> plans -> selection -> bound launch ->
memo (call.py), the selection step with its memo and measuring (decide.py), and the default registries of
td.gemm / td.conv* (defaults.py)."""
