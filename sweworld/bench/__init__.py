"""Benchmarks of sweworld against real execution: ``sweworld bench <name>`` (:mod:`.cli`).

Every benchmark writes one folder (:mod:`.output`: resumable ``rows.jsonl``,
``report.json``, ``report.md``, plots from :mod:`.plots`); BENCHMARKS.md is rendered from
the committed ``benchmarks/results/**/report.json`` (:mod:`.render`).

- :mod:`.swt_run` (+ :mod:`.swt_figures`): SWT on recorded real transitions, several
  models, oracle and blind, floors beside;
- :mod:`.swr_eval` (+ :mod:`.swr_figures`): SWR against real labels: classification and
  calibration metrics per stage and combined, floors, best-of-N;
- :mod:`.tts` (+ :mod:`.tts_selection`): the verifier's pick among N candidates against
  random, majority of equivalent patches and the oracle;
- :mod:`.e2e`: an agent on simulated vs real feedback, its patches graded for real;
- :mod:`.executors`: the same steps on Docker, Local and Simulated executors;
- :mod:`.throughput`: sessions and steps per second, memory per session;
- single measurements, each one command that prints its tables and writes ``--json`` /
  ``--out`` (:mod:`.summary`): :mod:`.sandbox` and :mod:`.quota` (before vs after a
  baseline commit: :mod:`.sandbox_compare`), :mod:`.local_overhead`, :mod:`.swt_live`,
  :mod:`.swr_stages`, :mod:`.adversarial`, :mod:`.facts_payoff`, :mod:`.embedded_speed`,
  :mod:`.outcome_speed`, :mod:`.vllm_cpu`, :mod:`.serve_load` (the world service under
  load), :mod:`.ray_pool`, :mod:`.import_throughput`, :mod:`.collect_throughput`,
  :mod:`.factory_throughput`, :mod:`.train_throughput`, :mod:`.data_outcome`;
- helpers: :mod:`.similarity` (agreement of a predicted result with the real one),
  :mod:`.sampling` (seeded stratified samples), :mod:`.records`, :mod:`.report`
  (provenance, an atomically rewritten JSON file).

Imports: anything below it (the lower layers, :mod:`sweworld.world`, env, data, serve for
the service benchmarks); nothing imports bench but the CLI. A command's scoring, runner
and figures import one way (``*_scoring`` <- ``*_figures`` <- ``*_eval`` / ``*_run``).
"""
