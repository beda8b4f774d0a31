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
# Knobs (environment variables exported to the job; booleans take 1/0, true/false, yes/no or on/off;
# generated from ftslurm/knobs.py by `python -m ftslurm.knobs --write`):
#   DEVICE                cpu: the debug model on CPU nodes (cuda or cpu) [cuda (cpu with
#                         FTSLURM_PRESET=debug_cpu)]
#   FTSLURM_PRESET        TOML and defaults (llama3_8b_ft, llama3_8b_diloco, debug_cpu, llama3_8b or
#                         tiny) [llama3_8b_ft (classic: llama3_8b; DEVICE=cpu: debug_cpu)]
#   STEPS                 training steps [1000 (200 with DEVICE=cpu)]
#   GPUS_PER_NODE         ranks per node = FSDP degree in the node; 1 on cpu [8 (1 with DEVICE=cpu)]
#   CHECKPOINT_FOLDER     torchtitan's checkpoint folder [<dump folder>/checkpoint]
#   WANDB_API_KEY         W&B logging (FT: from replica 0 only); never printed [unset]
#   RDZV_PORT             c10d rendezvous port on the head node [29500]
#   FTSLURM_LAZY_COMPILE  torchtitan's import-time torch.compile calls are made on first use: no
#                         inductor at start (startup.py); 0: at import [1]
#   FTSLURM_EXTRA_ARGS    torchtitan arguments, shell-quoted, appended last
#   FTSLURM_DUMP_FOLDER   torchtitan's dump folder [<outputs>/torchft/tft-<job>; classic:
#                         <outputs>/classic-<job>]
#   FTSLURM_OUTPUTS       the outputs folder: logs, runs, state (the CLI's too) [<checkout>/outputs]
#   FTSLURM_PYTHON        interpreter the scripts exec on the nodes [the submitting one (ftslurm
#                         submit); else python3]
#   FTSLURM_TORCHRUN      torchrun executable [beside that interpreter, else torchrun]
#   FTSLURM_SINGLE_NODE   no srun: one torchrun here, rendezvous on localhost [0]
#   FTSLURM_DRY_RUN       print the exact command; run nothing [0]
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
