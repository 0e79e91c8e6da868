"""Benchmarks of sweworld's models against real outcomes, as pure functions.

- :mod:`sweworld.bench.similarity`: agreement of a predicted execution result with the real
  one (exit code, per-test statuses, exception type, line-level output similarity),
  percentiles and rates;
- :mod:`sweworld.bench.sampling`: seeded, stratified samples (by command kind and
  repository; label-balanced);
- :mod:`sweworld.bench.report`: the run's provenance (machine, data, command line) and a
  JSON file rewritten as results arrive;
- :mod:`sweworld.bench.swt_eval`: SWT on held-out SWT records, several models, oracle and
  blind, with the floors beside;
- :mod:`sweworld.bench.swr_eval`: SWR on held-out SWR records: classification and
  calibration metrics, floors, best-of-N.

The scripts ``benchmarks/heldout_swt.py`` and ``benchmarks/heldout_swr.py`` are thin
command lines over these modules.
"""
