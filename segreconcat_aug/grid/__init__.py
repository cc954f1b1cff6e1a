"""The grid: train and evaluate attackers (systems x configurations), then assemble the paper's tables.

``recipes/run_grid.py hparams/grid.yaml`` drives it. Three steps, one module each:

- :mod:`.plan`: the grid file (:func:`load_grid`, checked before anything runs) and the runs it
  asks for (:func:`grid_cells`, :func:`grid_runs`, :func:`cell_folder`);
- :mod:`.runner`: each run's training then evaluation, as subprocesses here or as SLURM jobs
  (``launcher``), resumable through its status file (:func:`run_all`);
- :mod:`.results`: every run's evaluation read back and compared, the tables, figures and
  ``grid_results.csv/.json`` written (:func:`assemble`).

With ``learning_curve: True`` (``--learning_curve``), :mod:`.learning_curve` adds each row's
nested training fractions as configurations of their own and writes the curves.

``protocol`` (default ``vpac2024``) is passed to both commands and decides the tables' columns;
under ``vpc2026-track2`` every system is run once per language of ``languages`` (default: the four
the challenge scores), one attacker each, in ``<system>/<language>/<configuration>``.
``seeds: [a, b, ...]`` (in the grid, or per configuration) trains each cell once per seed, in
``<system>/<configuration>/seed<N>`` with ``--seed=N``; ``seeds: null`` is one run per cell with
the training YAML's seed, in ``<system>/<configuration>``.

The grid sits at the top of the package: it runs the recipes and reads what the evaluation
wing wrote, so it may import any wing and no wing imports it.
"""
