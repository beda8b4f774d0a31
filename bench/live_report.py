"""What a scrape of `ftslurm metrics` costs as a run's logs grow: the report built again from
the first byte (A, `build_report`, what metrics did) against the live report that reads only
what the logs appended (B, `report/live.py`).

The run is bench/report_speed.py's synthetic one (the real line shapes of a recorded CPU run,
repeated), written into a folder in `--rounds` equal parts, each part appended at line ends as
a live run appends; after each part both are built, their order alternated round by round,
and their JSON reports compared (they must be equal). Printed per kind of run: seconds per
build (median and range over the rounds, and the last round's: a scrape late in the run),
bytes parsed in all, and the logs covered per second of build time (work over total time).

    python bench/live_report.py                  # 100 MB, 20 rounds, both kinds of run
    python bench/live_report.py --mb 200 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_speed import generate  # noqa: E402

from ftslurm.report import build_report  # noqa: E402
from ftslurm.report.live import LiveReport  # noqa: E402


def _cuts(data: bytes, rounds: int) -> list[int]:
    """Where each of `rounds` parts of `data` ends: at a line's end."""
    cuts = []
    for i in range(1, rounds + 1):
        at = len(data) * i // rounds
        nl = data.rfind(b"\n", 0, at) + 1 if i < rounds else len(data)
        cuts.append(max(nl, cuts[-1] if cuts else 0))
    return cuts


def _report(build) -> tuple[float, dict, int]:
    t = time.perf_counter()
    rep = build()
    dt = time.perf_counter() - t
    return dt, json.loads(json.dumps(rep.to_json(), default=str)), rep.stats.bytes


def run_kind(src: Path, work: Path, rounds: int) -> dict:
    logs = {p.name: p.read_bytes() for p in sorted(src.iterdir())}
    cuts = {name: _cuts(data, rounds) for name, data in logs.items()}
    work.mkdir()
    live = LiveReport([work])
    a_s, b_s, a_bytes, equal = [], [], 0, True
    for r in range(rounds):
        for name, data in logs.items():
            start = cuts[name][r - 1] if r else 0
            with open(work / name, "ab") as fh:
                fh.write(data[start : cuts[name][r]])
        arms = [("A", lambda: build_report([work])), ("B", live.build)]
        if r % 2:
            arms.reverse()
        got = {}
        for arm, build in arms:
            got[arm] = _report(build)
        a_s.append(got["A"][0])
        b_s.append(got["B"][0])
        a_bytes += got["A"][2]
        equal = equal and got["A"][1] == got["B"][1]
        print(f"  round {r + 1}/{rounds}: A {got['A'][0]:.3f} s, B {got['B'][0]:.3f} s, "
              f"equal {got['A'][1] == got['B'][1]}", file=sys.stderr, flush=True)
    size = sum(len(d) for d in logs.values())
    covered = sum(sum(len(d[: cuts[n][r]]) for n, d in logs.items()) for r in range(rounds))
    return {
        "log_bytes": size,
        "rounds": rounds,
        "reports_equal": equal,
        "a_build_s": {"median": statistics.median(a_s), "min": min(a_s), "max": max(a_s),
                      "last": a_s[-1], "total": sum(a_s)},
        "b_build_s": {"median": statistics.median(b_s), "min": min(b_s), "max": max(b_s),
                      "last": b_s[-1], "total": sum(b_s)},
        "a_bytes_parsed": a_bytes,
        "b_bytes_parsed": live.bytes_read,
        "a_mb_covered_per_s": covered / 1e6 / sum(a_s),
        "b_mb_covered_per_s": covered / 1e6 / sum(b_s),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="size of each run's logs (MB)")
    ap.add_argument("--rounds", type=int, default=20, help="parts the logs grow in")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    out = {"mb": args.mb, "load_before": os.getloadavg()[0], "kinds": {}}
    with tempfile.TemporaryDirectory(prefix="ftslurm-live-") as tmp:
        for kind in ("steady", "failing"):
            src = Path(tmp) / f"{kind}-src"
            generate(src, args.mb, steady=kind == "steady")
            print(f"{kind}: {args.mb:.0f} MB in {args.rounds} rounds", file=sys.stderr)
            out["kinds"][kind] = run_kind(src, Path(tmp) / kind, args.rounds)
    out["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for kind, k in out["kinds"].items():
            a, b = k["a_build_s"], k["b_build_s"]
            print(f"{kind}: {k['log_bytes'] / 1e6:.0f} MB in {k['rounds']} rounds, reports "
                  f"equal: {k['reports_equal']}")
            print(f"  A (whole logs each build): median {a['median']:.3f} s "
                  f"[{a['min']:.3f}..{a['max']:.3f}], last {a['last']:.3f} s, "
                  f"{k['a_bytes_parsed'] / 1e6:.0f} MB parsed")
            print(f"  B (live: what was appended): median {b['median']:.3f} s "
                  f"[{b['min']:.3f}..{b['max']:.3f}], last {b['last']:.3f} s, "
                  f"{k['b_bytes_parsed'] / 1e6:.0f} MB parsed")
    return 0 if all(k["reports_equal"] for k in out["kinds"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
