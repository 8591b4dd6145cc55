#!/usr/bin/env python3
"""gex-perf over the ofi conduit side by side with fi-floor (the raw libfabric floor),
interleaved in the same run, so that a ratio compares figures taken under the same
machine conditions.

    benches/fi-floor/side-by-side.py [--rounds N] [--provider tcp|shm] [--pin|--no-pin]

Needs `cargo build --release -p gex-perf --features ofi` and benches/fi-floor/build.sh.
Each round runs: fi-floor (re-posted buffers), fi-floor --multi-recv, gex-perf am
am_short_rtt; every program reports the median of 7 batches. Prints each round, then
the median over rounds of every figure and of the per-round ratios gex / floor. Run it
under `nice -n -20` on a shared machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--provider", default="tcp")
g = p.add_mutually_exclusive_group()
g.add_argument("--pin", action="store_true")
g.add_argument("--no-pin", action="store_true")
a = p.parse_args()
pin = ["--no-pin"] if a.no_pin else ["--pin"]
env = dict(os.environ, GEX_OFI_PROVIDER=a.provider)
rel = os.path.join(root, "target", "release")


def value(cmd):
    r = subprocess.run(["timeout", "120"] + cmd, capture_output=True, text=True, env=env)
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)["value"]
    sys.stderr.write(f"no result from {' '.join(cmd)}: {r.stderr[-500:]}\n")
    return float("nan")


floor = [os.path.join(rel, "fi-floor"), "--provider", a.provider, "--json"] + pin
gex = [os.path.join(rel, "gex-perf"), "-n", "2"] + pin + [
    "--conduit", "ofi", "am", "--test", "am_short_rtt", "--json"]
rows = []
for r in range(a.rounds):
    f = value(floor)
    fm = value(floor + ["--multi-recv"])
    x = value(gex)
    rows.append((f, fm, x))
    print(f"round {r + 1}: fi-floor {f:.3f} us, fi-floor --multi-recv {fm:.3f} us, "
          f"gex am_short_rtt {x:.3f} us; gex/floor {x / f:.3f}, gex/floor-multi {x / fm:.3f}",
          flush=True)
med = [statistics.median(c) for c in zip(*rows)]
ratio = statistics.median(x / f for f, _, x in rows)
ratio_m = statistics.median(x / fm for _, fm, x in rows)
print(f"provider {a.provider}, {pin[0]}, {a.rounds} rounds: median fi-floor {med[0]:.3f} us, "
      f"fi-floor --multi-recv {med[1]:.3f} us, gex {med[2]:.3f} us; "
      f"median ratio gex/floor {ratio:.3f}, gex/floor-multi {ratio_m:.3f}")
