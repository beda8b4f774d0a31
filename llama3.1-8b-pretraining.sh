#!/bin/bash
# Classic (not fault-tolerant) Llama-3.1-8B pre-training with torchtitan 0.2.2: one torchrun
# per node, c10d rendezvous on the first node, FSDP over every GPU. Any failure ends the job:
# the baseline for llama3.1-8b-pretraining-torchft.sh.
#
#   sbatch -N 2 llama3.1-8b-pretraining.sh
#   local CPU cluster: sbatch -N 2 --gpus-per-task=0 --cpus-per-task=1 --export=ALL,DEVICE=cpu llama3.1-8b-pretraining.sh
#   (--mem=0 below asks for all node memory; size it with --mem=<size>, not --mem-per-cpu or
#   --mem-per-gpu, which Slurm 22.05 refuses next to it: "mutually exclusive")
#
# Knobs (environment variables; all of them in ftslurm/replica/plan.py):
#   DEVICE=cuda|cpu  FTSLURM_PRESET=llama3_8b  STEPS=1000  GPUS_PER_NODE=8  RDZV_PORT=29500
#   WANDB_API_KEY  FTSLURM_PYTHON=python3  FTSLURM_DRY_RUN=1 (print the command, run nothing)
#
#SBATCH --job-name=llama3_8b
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-task=8
#SBATCH --cpus-per-task=128
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --export=ALL
#SBATCH --output=outputs/classic-%j.out
set -euo pipefail

exec "${FTSLURM_PYTHON:-python3}" -m ftslurm.replica classic
