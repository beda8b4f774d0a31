"""The light replica of `FTSLURM_PRESET=tiny`: a real torchft Manager, a real gloo process
group, a tiny model. `python -m ftslurm.replica.worker.tiny --steps N`, run by the launcher
(job.py).

Why: torchtitan's debug model under torchrun is two interpreters of ~400 MB each and seconds
of CPU per step, so 64 replicas do not fit a 2-core, 24 GB machine. Everything that makes a
replica fault tolerant stays real: the launcher (banner, requeue path), torchft's Manager
(Lighthouse quorums, heartbeats, healing from a peer over its HTTP checkpoint transport,
should_commit), the gloo all-reduce across replicas, and the parameter checksums
(checksum.py). Only the trainer is small: a 2-layer MLP on random data, per-step FT (one
all-reduce and one commit per step, as torchtitan's per-step mode).

The log lines keep torchtitan's shapes, so `ftslurm report`, `status` and `logs` read them
unchanged: the logger is torchtitan's own `init_logger` (loaded from its file, without the
torchtitan package's imports, which cost 2 s and ~120 MB per process), torchft logs through
it as under torchtitan, and the step line is torchtitan's MetricsProcessor line
(torchtitan/components/metrics.py, colours off as in the recorded CPU logs):
  `step:  3  loss:  7.90834  grad_norm:  0.8664  memory:  1.11GiB(4.71%)  tps: 314  ...`
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import resource
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from ftslurm import knobs

DIM = 32  # 2 x (32 x 32) + biases: 2,112 parameters; the replica's cost is torch + torchft
BATCH = 16


def _titan_logger() -> logging.Logger:
    """torchtitan's root logger set up by torchtitan.tools.logging.init_logger, executed from
    its file: importing it as a module would first import the torchtitan package (and its
    quantization registry)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torchtitan is not installed: pip install -r requirements.txt")
    path = Path(list(spec.submodule_search_locations)[0]) / "tools" / "logging.py"
    file_spec = importlib.util.spec_from_file_location("_ftslurm_titan_logging", path)
    assert file_spec is not None and file_spec.loader is not None
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    module.init_logger()
    return module.logger


def step_line(step: int, loss: float, grad_norm: float, tps: float) -> str:
    """torchtitan's step line (MetricsProcessor.log, NoColor), memory as on a CPU node: the
    process's peak RSS against the machine's memory."""
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"step: {step:2}  loss: {loss:8.5f}  grad_norm: {grad_norm:7.4f}  "
        f"memory: {peak_gib:5.2f}GiB({100 * peak_gib / total_gib:.2f}%)  "
        f"tps: {round(tps):,}  tflops: {0.0:,.2f}  mfu: {0.0:.2f}%"
    )


class TinyTrainer:
    """The model, its optimizer and the training step, with the state torchft heals."""

    def __init__(self, replica: int) -> None:
        import torch

        torch.manual_seed(0)  # the same start everywhere; torchft's init sync makes sure
        self.replica = replica
        self.model = torch.nn.Sequential(
            torch.nn.Linear(DIM, DIM), torch.nn.Tanh(), torch.nn.Linear(DIM, DIM)
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.step = 0
        target = torch.Generator().manual_seed(1234)
        self.teacher = torch.randn(DIM, DIM, generator=target) / DIM**0.5

    def state_dict(self) -> dict[str, Any]:
        """What a healing peer receives: weights, optimizer moments and the step."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])

    def batch(self) -> tuple[Any, Any]:
        """Each replica's own data, new every step (the cross-replica average is the point)."""
        import torch

        g = torch.Generator().manual_seed(self.replica * 1_000_003 + self.step)
        x = torch.randn(BATCH, DIM, generator=g)
        return x, torch.tanh(x @ self.teacher)


def train(steps: int, replica: int, logger: logging.Logger) -> int:
    """Per-step FT, as torchtitan's FT trainer with the async-quorum fix: quorum before
    forward, gradients averaged over the quorum, the optimizer steps only on a commit."""
    import torch
    from torch.distributed import TCPStore
    from torchft import Manager, ProcessGroupGloo
    from torchft.checkpointing.http_transport import HTTPTransport

    from ftslurm.replica.worker import checksum, fixes

    s = knobs.environ().on("cpu")  # the tiny worker runs on CPU: its defaults
    # before the Manager exists
    for line in fixes.apply(s, only=("rendezvous_namespace", "peer_abort")):
        logger.info(line)
    pg_timeout = timedelta(seconds=s.PG_TIMEOUT_S or 60)
    heal_timeout = timedelta(seconds=s.FTSLURM_HEAL_TIMEOUT_S)
    every = s.FTSLURM_CHECKSUM_EVERY
    pause = s.FTSLURM_TINY_STEP_S
    trainer = TinyTrainer(replica)
    # the store torchrun's agent would host (MASTER_ADDR:MASTER_PORT): the Manager only
    # connects to one; peers reach it at <fqdn>:<port>, as under torchrun
    host = socket.getfqdn()
    store = TCPStore(host, 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=pg_timeout),
        load_state_dict=trainer.load_state_dict,
        state_dict=trainer.state_dict,
        min_replica_size=1,
        use_async_quorum=False,  # fixes.py fix 1: the quorum ends before forward starts
        replica_id=f"torchtitan_ft_{replica}",
        store_addr=host,
        store_port=store.port,
        rank=0,
        world_size=1,
        checkpoint_transport=HTTPTransport(timeout=heal_timeout, num_chunks=0),
    )
    logger.info(f"Training starts at step {trainer.step + 1}")
    try:
        while trainer.step < steps:
            t0 = time.perf_counter()
            trainer.optimizer.zero_grad()
            manager.start_quorum()  # may heal: load_state_dict sets the step
            x, y = trainer.batch()
            loss = torch.nn.functional.mse_loss(trainer.model(x), y)
            loss.backward()
            if pause:  # the step's compute, between the quorum and the all-reduce, as on a GPU
                time.sleep(pause)
            grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
            for work in [manager.allreduce(g) for g in grads]:
                work.wait()
            grad_norm = float(torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(g) for g in grads])))  # fmt: skip
            if manager.should_commit():
                trainer.optimizer.step()
                trainer.step += 1
                if every and trainer.step % every == 0:
                    hexd, count = checksum.digest(trainer.model.named_parameters())
                    logger.info(checksum.format_line(replica, 0, trainer.step,
                                manager.current_step(), "model", count, hexd))  # fmt: skip
                tps = BATCH * DIM / max(time.perf_counter() - t0, 1e-9)
                logger.info(step_line(trainer.step, loss.item(), grad_norm, tps))
    finally:
        manager.shutdown(wait=False)
    logger.info("Training completed")
    return 0


def main(argv: list[str] | None = None) -> int:
    from ftslurm.replica.worker.train import check_lifeline

    check_lifeline()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, required=True)
    args = ap.parse_args(argv)
    logger = _titan_logger()
    replica = knobs.environ().FTSLURM_REPLICA_ID or 0
    logger.info(f"Starting job: tiny MLP ({DIM}x{DIM}), fault tolerant, CPU")
    return train(args.steps, replica, logger)


if __name__ == "__main__":
    sys.exit(main())
