# For each record of ftslurm/replica/patches.py (imported read-only from /work/main, no .pyc
# written): does its target (and its needs) exist in THIS interpreter's stack? For the ones
# missing, try the candidate new location in torchtitan 0.3.0.
import sys, json, os
sys.dont_write_bytecode = True
sys.path.insert(0, "/work/main")
from ftslurm.replica import patches as P

OLD_TO_NEW = {
    "torchtitan.components.ft.manager.ft": "torchtitan.experiments.torchft.manager.torchft",
    "torchtitan.components.ft.manager.FTManager": "torchtitan.experiments.torchft.manager.TorchFTManager",
    "torchtitan.components.optimizer.FTOptimizersContainer": "torchtitan.experiments.torchft.optimizer.TorchFTOptimizersContainer",
    "torchtitan.experiments.ft.train.FTTrainer": "torchtitan.experiments.torchft.trainer.FaultTolerantTrainer",
    "torchtitan.components.checkpoint.CheckpointManager._ft": "torchtitan.experiments.torchft.checkpoint.TorchFTCheckpointManager._ft",
    "torchtitan.train.Trainer": "torchtitan.trainer.Trainer",
}

def candidate(path):
    for old, new in OLD_TO_NEW.items():
        if path.startswith(old):
            return new + path[len(old):]
    return None

def exists(path, kind=None):
    p = path
    if kind in (P.ADD, P.INSTANCE):
        p = P._split(path)[0]
    try:
        return P._absent(p) is None
    except Exception as e:
        return False

rows = []
for r in P.RECORDS:
    tgt_ok = exists(r.target, r.kind)
    tgt_attr_ok = exists(r.target)  # the attribute itself (for ADD: does upstream have it now?)
    needs = {n: exists(n) for n in r.needs}
    cand = candidate(r.target)
    cand_ok = exists(cand, r.kind) if cand else None
    need_cands = {n: (candidate(n), exists(candidate(n))) for n, ok in needs.items() if not ok and candidate(n)}
    line = P.check(r)
    rows.append(dict(name=r.name, target=r.target, kind=r.kind, owner=r.owner, target_exists=tgt_ok,
                     attr_itself_exists=tgt_attr_ok, needs=needs, candidate=cand, candidate_exists=cand_ok,
                     need_candidates=need_cands, check_line=line))
json.dump(rows, sys.stdout, indent=1)
