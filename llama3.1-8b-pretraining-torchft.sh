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
# Knobs (environment variables exported to the job; booleans take 1/0, true/false, yes/no or on/off;
# generated from ftslurm/knobs.py by `python -m ftslurm.knobs --write`):
#   DEVICE                               cpu: the debug model on CPU nodes (cuda or cpu) [cuda (cpu
#                                        with FTSLURM_PRESET=debug_cpu)]
#   FTSLURM_PRESET                       TOML and defaults (llama3_8b_ft, llama3_8b_diloco,
#                                        debug_cpu, llama3_8b or tiny) [llama3_8b_ft (classic:
#                                        llama3_8b; DEVICE=cpu: debug_cpu)]
#   STEPS                                training steps [1000 (200 with DEVICE=cpu)]
#   GPUS_PER_NODE                        ranks per node = FSDP degree in the node; 1 on cpu [8 (1
#                                        with DEVICE=cpu)]
#   PROCESS_GROUP                        torchft's cross-replica process group (nccl or gloo) [nccl
#                                        (gloo with DEVICE=cpu)]
#   FT_MODE                              per-step: HSDP, a cross-replica all-reduce every step
#                                        (per-step or diloco) [from the preset]
#   SYNC_STEPS                           DiLoCo: inner steps between outer syncs [from the TOML]
#   NUM_FRAGMENTS                        DiLoCo: model fragments, synced in turn [from the TOML]
#   PG_TIMEOUT_S                         cross-replica process-group timeout, seconds [from the
#                                        TOML]
#   CHECKPOINT_FOLDER                    torchtitan's checkpoint folder [<dump folder>/checkpoint]
#   FTSLURM_TIME_LIMIT_SIGNAL_S          seconds before Slurm's time limit at which the FT job gets
#                                        USR1: each replica finishes its step, saves a final
#                                        checkpoint and requeues; ftslurm submit
#                                        (--time-limit-signal) passes it as --signal=B:USR1@<s>
#                                        (with a bare sbatch, pass that yourself), the launcher logs
#                                        it; it must cover a step and the save, and Slurm may signal
#                                        up to 60 s early [300 (the FT script's #SBATCH
#                                        --signal=B:USR1@300)]
#   TORCHFT_LIGHTHOUSE                   the address ftslurm lighthouse start prints
#                                        [http://login-0:29510]
#   TORCHFT_QUORUM_RETRIES               quorum retries: replicas outlive a Lighthouse restart [3]
#   FT_MAX_REQUEUES                      a lifetime cap on self-requeues (per SLURM_RESTART_COUNT),
#                                        applied only when set: a multi-day run loses no replica to
#                                        a failure a day; the rate cap FT_MAX_FAILS bounds a crash
#                                        loop [unset: no lifetime cap]
#   FT_MAX_FAILS                         a replica stops requeueing itself after this many failures
#                                        within FT_FAIL_WINDOW_MIN (on any node): a crash loop fails
#                                        every few minutes, a healthy replica far less than once an
#                                        hour [5]
#   FT_FAIL_WINDOW_MIN                   the window of FT_MAX_FAILS and FT_NODE_MAX_FAILS, minutes:
#                                        30 holds 5 restarts of an 8B replica (load, heal) with room
#                                        to spare [30]
#   FT_MAX_RESTARTS                      a failed replica whose node is fine (still allocated, not
#                                        down or drained) restarts its training in place, in the
#                                        same allocation, up to this many times per allocation
#                                        before it requeues through Slurm: no requeue hold, no new
#                                        allocation (a kill on CPU: full strength in 4.55 s, 11.34 s
#                                        through the requeue); 3 bounds the failed starts on a node
#                                        no check caught before Slurm places the replica again;
#                                        FT_MAX_FAILS and FT_NODE_MAX_FAILS still apply; 0: always
#                                        requeue [3]
#   FT_WARM_RESTART                      once a replica trains, the run that would restart it in
#                                        place is started ahead and waits warm (imports done, before
#                                        torchft's Manager), so a restart in place skips torchrun
#                                        and the imports (warm_restart.py); costs one idle copy of
#                                        the replica's processes per node (on a GPU a CUDA context
#                                        per rank: off there until measured) [0 (1 with DEVICE=cpu)]
#   FT_NODE_MAX_FAILS                    a node on which this array's replicas failed this often
#                                        within FT_FAIL_WINDOW_MIN, over twice as often as on any
#                                        other node, is drained (or avoided); 2: one failure is
#                                        retried in place, a second moves the replica; below
#                                        FT_MAX_FAILS, so a moved replica still has tries left; 0:
#                                        never for failures [2]
#   FTSLURM_BAD_NODES                    what a bad node (failed pre-flight check,
#                                        FT_NODE_MAX_FAILS) gets: drain (scontrol update
#                                        State=DRAIN; where Slurm refuses, avoid), avoid (the task's
#                                        ExcNodeList), off (nothing) (drain, avoid or off) [drain]
#   FTSLURM_PREFLIGHT                    the launcher checks the node before training (preflight.py:
#                                        GPU count, nvidia-smi, ECC / row remaps, an allocation per
#                                        GPU) [1]
#   FTSLURM_PREFLIGHT_FAIL               names a pre-flight check that fails on purpose (tests,
#                                        drills): cpu on CPU nodes, or any check's name;
#                                        <check>@<node> on that node only [unset]
#   FTSLURM_LOG_FILTER                   torchft's quorum lines, repeated every step, are folded in
#                                        the replica logs and the managed Lighthouse's
#                                        (logfilter.py): the member list whole when the quorum
#                                        changes, one short line otherwise (ftslurm lighthouse start
#                                        reads it too); 0: every line as torchft writes it [1]
#   FT_SPARES                            warm spares: of --array=0-<N-1+S>, the last S tasks wait
#                                        warm and take a failed replica's slot [0]
#   FTSLURM_SPARE_GRACE_S                a spare takes a slot whose holder has not heartbeated this
#                                        long after claiming it [300]
#   WANDB_API_KEY                        W&B logging (FT: from replica 0 only); never printed
#                                        [unset]
#   FTSLURM_HEAL_TIMEOUT_S               a survivor's wait for a healing peer's download (torchft:
#                                        60 s) [600]
#   FTSLURM_HEAL_TRANSPORT               how a healing replica gets a peer's state (fix 4): one HTTP
#                                        stream, parallel ones, or the cross-replica process group
#                                        (received in place) (http, http-chunked or pg) [pg]
#   FTSLURM_HEAL_CHUNKS                  parallel requests of FTSLURM_HEAL_TRANSPORT=http-chunked
#                                        [8]
#   FTSLURM_HEAL_MBPS                    MB/s a heal moves per rank, an estimate: fix 6 adds twice
#                                        the heal's time (state size / this) to the cross-replica
#                                        timeout [500]
#   FTSLURM_CHECKSUM_EVERY               parameter checksum every N committed steps; 0 = off [50 (1
#                                        with DEVICE=cpu)]
#   FTSLURM_CHECKSUM_ASYNC               hash on a thread, from a pinned host copy [1 (0 with
#                                        DEVICE=cpu)]
#   FTSLURM_FIX_ASYNC_QUORUM             fix 1 (fixes.py): the quorum ends before forward starts; 0:
#                                        upstream's way [1]
#   FTSLURM_FIX_OPTIMIZER_STATE          fix 2 (fixes.py): a heal sends the live optimizer state; 0:
#                                        upstream's way [1]
#   FTSLURM_FIX_UNSHARDED_ALLREDUCE      fix 3 (fixes.py): 1-rank replicas average gradients; 0:
#                                        upstream's way [1]
#   FTSLURM_FIX_HEAL_TIMEOUT             fix 4 (fixes.py): a heal may take FTSLURM_HEAL_TIMEOUT_S;
#                                        0: upstream's way [1]
#   FTSLURM_FIX_FT_CHECKPOINT_RETENTION  fix 5 (fixes.py): one FT dataloader checkpoint kept; 0:
#                                        upstream's way [1]
#   FTSLURM_FIX_HEAL_TIMEOUT_FLOOR       fix 6 (fixes.py): a survivor's collectives outlast a peer's
#                                        heal; 0: upstream's way [1]
#   FTSLURM_FIX_RENDEZVOUS_NAMESPACE     fix 7 (fixes.py): a restarted Lighthouse's quorums connect;
#                                        0: upstream's way [1]
#   FTSLURM_FIX_PEER_ABORT               fix 8 (fixes.py): a silent peer fails the survivors' step
#                                        at once; 0: upstream's way [1]
#   FTSLURM_FIX_CONSISTENT_RESUME        fix 9 (fixes.py): a restart's data position is the model
#                                        checkpoint's step; 0: upstream's way [1]
#   FTSLURM_FIX_GLOO_FSDP                fix 10 (fixes.py): replicas of several ranks on CPU: FSDP
#                                        reduces with SUM over gloo; 0: upstream's way [1]
#   FTSLURM_FIX_DILOCO_STATE             fix 11 (fixes.py): a DiLoCo resume from a checkpoint
#                                        restores the outer optimizers and the sync schedule; 0:
#                                        upstream's way [1]
#   FTSLURM_HANG_TIMEOUT_S               the launcher's watchdog (watchdog.py) restarts a worker
#                                        that is stopped while the Lighthouse lost its heartbeat, or
#                                        that made no progress for this long in a long phase (its
#                                        first steps, a wait on its peers, a checkpoint save, a
#                                        heal; the worker raises it to 20 median steps or twice
#                                        torchft's timeout); 0: no watchdog [300 (60 with
#                                        DEVICE=cpu)]
#   FTSLURM_STALL_TIMEOUT_S              the watchdog's stall rule: a worker whose training thread
#                                        made no progress in its compute for 3 median steps, and at
#                                        least this long, is stalled (a CUDA call that never returns
#                                        under a live heartbeat) and is restarted; 0: stalls only by
#                                        FTSLURM_HANG_TIMEOUT_S [30 (5 with DEVICE=cpu)]
#   FTSLURM_TINY_STEP_S                  FTSLURM_PRESET=tiny: pause per step (paces many replicas on
#                                        few cores) [0.5]
#   FTSLURM_EARLY_FIRST_SYNC             a restarted DiLoCo replica or spare syncs before any step
#                                        [1]
#   FTSLURM_SKIP_TORCHRUN                one rank per node: the launcher runs the training module
#                                        itself, with torchrun's env (startup.py); 0: torchrun [1]
#   FTSLURM_LAZY_COMPILE                 torchtitan's import-time torch.compile calls are made on
#                                        first use: no inductor at start (startup.py); 0: at import
#                                        [1]
#   FTSLURM_EXTRA_ARGS                   torchtitan arguments, shell-quoted, appended last
#   FTSLURM_DUMP_FOLDER                  torchtitan's dump folder [<outputs>/torchft/tft-<job>;
#                                        classic: <outputs>/classic-<job>]
#   FTSLURM_OUTPUTS                      the outputs folder: logs, runs, state (the CLI's too)
#                                        [<checkout>/outputs]
#   FTSLURM_PYTHON                       interpreter the scripts exec on the nodes [the submitting
#                                        one (ftslurm submit); else python3]
#   FTSLURM_TORCHRUN                     torchrun executable [beside that interpreter, else
#                                        torchrun]
#   FTSLURM_DRY_RUN                      print the exact command; run nothing [0]
#
# Logs: outputs/torchft/tft-<array job>/tft-<array job>_<task>.out, appended by every attempt;
# outputs/ is $FTSLURM_OUTPUTS (`ftslurm submit` passes the checkout's), else the submit folder's.
# Slurm's own --output below only gets Slurm's messages; its folder is committed to git,
# because Slurm does not create output folders and a job with a missing one fails unrequeued.
# Time limit: Slurm sends USR1 to this script (the launcher, exec'd) 300 s before it; each
# replica finishes its step, a final model checkpoint is written and the task requeues itself,
# so training goes on to STEPS across limits ("time limit -> checkpoint -> requeue" in the log).
# Another margin: ftslurm submit --time-limit-signal <seconds> (FTSLURM_TIME_LIMIT_SIGNAL_S;
# with a bare sbatch: --signal=B:USR1@<seconds>). It must cover a step and the save; Slurm
# checks limits every 30 s and may signal up to 60 s early.
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
#SBATCH --signal=B:USR1@300
#SBATCH --export=ALL
#SBATCH --output=outputs/torchft/slurm-%A_%a.out
set -euo pipefail

job="${SLURM_ARRAY_JOB_ID:?submit as a job array: sbatch --array=0-1 llama3.1-8b-pretraining-torchft.sh}"
task="${SLURM_ARRAY_TASK_ID:?submit as a job array: sbatch --array=0-1 llama3.1-8b-pretraining-torchft.sh}"
log_dir="${FTSLURM_OUTPUTS:-outputs}/torchft/tft-${job}"
mkdir -p "$log_dir"
exec >>"$log_dir/tft-${job}_${task}.out" 2>&1
exec "${FTSLURM_PYTHON:-python3}" -m ftslurm.replica job
