"""One training replica: the launcher the sbatch scripts call (`python -m ftslurm.replica job`)
and the training worker it starts (torchrun's `python -m ftslurm.replica.worker.train`).

Two processes, one folder each (tests/test_architecture.py checks the floors: the launcher's
side loads no torch, neither side imports the other's modules, and the modules here import
neither side but `__main__`, the launcher's entry):

- `launcher/`: the process Slurm starts, one per array task (the attempt loop, what it does
  when a run ends, node health, failure history, the watchdog, the warm next run).
- `worker/`: torchrun's ranks, where torch, torchft and torchtitan are imported (the entry,
  the tiny model's worker, the fixes and the other patches).
- here, both: `plan` (pure: knobs -> the exact command and its environment, dry-runnable),
  `handoff` (the variables, words and notes the two pass each other), `patches` (the patch
  records), `exits` (the exit codes), `config_error` (the worker's note that torchtitan
  refused its options), `slots` (the spares' claim files), `assets` (tokenizer and local CPU
  assets).
"""
