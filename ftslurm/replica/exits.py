"""The exit codes a replica's processes end with, in one place: what each tells Slurm, the
launcher's next step and a person reading `sacct`. The launcher (job.py, preflight.py) and the
training worker (standby.py) both end with them, so they live here, not in either."""

# A user mistake, as for UserError: torchtitan refused its options, every attempt would;
# never requeued (the SkyPilot restart loop does not restart on it either)
CONFIG_ERROR = 2
# this replica was fenced out of its slot (a warm spare claimed it): the worker ends with it,
# then the launcher, which waits as a spare instead of requeueing
FENCED = 75
# the attempt ended before training: this node failed a pre-flight check
PREFLIGHT = 76
# the attempt stopped at Slurm's time limit after its final checkpoint and requeued itself:
# not 0, the replica has not finished (a warm-spare run must not mark its slot done)
TIME_LIMIT = 77
# the launcher's own answer when the training restarts in this allocation; never an exit code
RESTART_IN_PLACE = -1
