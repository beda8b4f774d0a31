"""Loopback transfers of 2 GiB between two threads (a plain socket pair, sendall / recv_into
from and into torch tensors), 1.5 s apart; writes each one's (start, end, GB/s) in
CLOCK_MONOTONIC seconds, so that a `perf record -a -k CLOCK_MONOTONIC` of the run can be cut
per transfer. Usage: loopback_transfers.py TRANSFERS OUT.json"""

import json
import socket
import sys
import threading
import time

import torch

N = 2 << 30
src = torch.ones(N // 4)
dst = torch.zeros(N // 4)


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def transfer() -> tuple[float, float]:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(memoryview(src.view(torch.uint8).numpy()))

    th = threading.Thread(target=send)
    t0 = now()
    th.start()
    conn, _ = srv.accept()
    view = memoryview(dst.view(torch.uint8).numpy())
    got = 0
    while got < N:
        got += conn.recv_into(view[got:])
    th.join()
    conn.close()
    srv.close()
    return t0, now()


out = []
for i in range(int(sys.argv[1])):
    time.sleep(1.5)
    a, b = transfer()
    out.append((a, b, N / 1e9 / (b - a)))
    print(f"{i} {out[-1][2]:.2f}", flush=True)
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
