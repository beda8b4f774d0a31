"""One training replica: the launcher the sbatch scripts call (`python -m ftslurm.replica`).

Split by job so each part can be read and tested alone:
- `plan`     pure: env knobs -> the exact torchrun command and its environment (dry-runnable).
- `job`      the per-attempt wrapper: banner line, runs torchrun, forwards SIGTERM, requeues.
- `train`    what torchrun runs: CPU shims, healing fixes, checksums, then torchtitan's FT trainer.
- `fixes`    the healing-bug fixes, one switch each.
- `startup`  the cheaper start: no torchrun for one rank per node, deferred torch.compile.
- `checksum` a bit-exact parameter hash logged at committed steps, and its parser.
- `assets`   tokenizer download and tiny local assets for CPU runs.

Only `train`, `cpu`, `startup`, `fixes` and `checksum` import torch; `plan` and `job` never
do, so the CLI and the sbatch scripts' dry runs stay fast.
"""
