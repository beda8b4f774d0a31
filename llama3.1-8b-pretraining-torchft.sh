#!/bin/bash
# Fault-tolerant Llama-3.1-8B pre-training (torchtitan 0.2.2 + torchft): one replica per
# node, one task of a requeueable Slurm job array per replica. Replicas find each other
# through the torchft Lighthouse, which must run first (`ftslurm lighthouse start`).
#
#   GPU nodes (8 GPUs each):  sbatch --array=0-1 llama3.1-8b-pretraining-torchft.sh
#   local CPU cluster:        DEVICE=cpu ftslurm submit --array=0-1 llama3.1-8b-pretraining-torchft.sh
#     which is: sbatch --gpus-per-task=0 --cpus-per-task=1 --export=ALL,DEVICE=cpu --array=0-1 ...
#     (sbatch command-line options override the #SBATCH lines below).
#     --mem=0 below asks for all node memory; to size it, pass --mem=<size>: on Slurm 22.05
#     --mem-per-cpu / --mem-per-gpu clash with it (sbatch: fatal: ... mutually exclusive).
#
# Knobs (environment variables exported to the job; all of them in ftslurm/replica/plan.py):
#   DEVICE=cuda|cpu                 cpu = the debug model with the debug_cpu preset
#   FTSLURM_PRESET                  llama3_8b_ft (default) | llama3_8b_diloco | debug_cpu
#   STEPS=1000  GPUS_PER_NODE=8  FT_MODE=per-step|diloco  SYNC_STEPS  NUM_FRAGMENTS
#   PROCESS_GROUP=nccl  PG_TIMEOUT_S  CHECKPOINT_FOLDER  FTSLURM_HEAL_TIMEOUT_S=600
#   TORCHFT_LIGHTHOUSE=http://login-0:29510  TORCHFT_QUORUM_RETRIES=3
#   FT_MAX_REQUEUES=5               self-requeues after a crash (OOM kill, dead worker)
#   WANDB_API_KEY                   W&B on replica 0 only, when set
#   FTSLURM_PYTHON=python3          interpreter of the environment with ftslurm installed
#   FTSLURM_DRY_RUN=1               print the exact command, run nothing
#
# Logs: outputs/torchft/tft-<array job>/tft-<array job>_<task>.out, appended by every attempt;
# outputs/ is $FTSLURM_OUTPUTS (`ftslurm submit` passes the checkout's), else the submit folder's.
# Slurm's own --output below only gets Slurm's messages; its folder is committed to git,
# because Slurm does not create output folders and a job with a missing one fails unrequeued.
#
#SBATCH --job-name=tft_replica
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-task=8
#SBATCH --cpus-per-task=128
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --export=ALL
#SBATCH --output=outputs/torchft/slurm-%A_%a.out
set -euo pipefail

job="${SLURM_ARRAY_JOB_ID:?submit as a job array: sbatch --array=0-1 llama3.1-8b-pretraining-torchft.sh}"
task="${SLURM_ARRAY_TASK_ID:?submit as a job array: sbatch --array=0-1 llama3.1-8b-pretraining-torchft.sh}"
log_dir="${FTSLURM_OUTPUTS:-outputs}/torchft/tft-${job}"
mkdir -p "$log_dir"
exec >>"$log_dir/tft-${job}_${task}.out" 2>&1
exec "${FTSLURM_PYTHON:-python3}" -m ftslurm.replica job
