"""The studies (docs/design.md §10): what numoracle measures about kernels and tolerances,
built on the case engine (``numoracle.strategies`` draws cases, ``numoracle.runner`` runs
and judges a kernel on one) and on the verdict core.

- ``runs``: a kernel run over cases, judged by numoracle and every baseline on the same
  outputs;
- ``campaign``: the paper's evaluation (correct kernels and variants, mutation, change
  pairs) and its report;
- ``mutation``: AST mutants of Triton kernels and their kill matrix;
- ``stress``: fixed (atol, rtol) configurations searched for false alarms and misses;
- ``executors``: work units run in local processes or on Dask.
"""
