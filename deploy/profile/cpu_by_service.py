#!/usr/bin/env python3
"""CPU seconds of a jetrl CPU profile by service.

Usage: deploy/profile/cpu_by_service.py BINARY PROFILE [BINARY PROFILE ...]

Reads `go tool pprof -traces` of each profile written by a benchmark's --cpuprofile (the services
in one process) and gives each sample to the first of: the trainer's batches, the env host's db
family, the rest of the env host, the rollouts, the NATS server, the NATS clients, other (the Go
runtime, the replay-buffer, the normalizer). "non-trainer" is everything but the trainer's batches.
"""
import collections
import re
import subprocess
import sys

RULES = [
    ("trainer", "trainer.(*Trainer).handle"),
    ("env db", "services/env/task/db."),
    ("env other", "services/env"),
    ("rollout", "services/rollout"),
    ("nats-server", "nats-server"),
    ("nats client", "nats%2ego"),
]


def by_service(binary, profile):
    out = subprocess.run(["go", "tool", "pprof", "-traces", binary, profile],
                         capture_output=True, text=True, check=True).stdout
    secs = collections.Counter()
    for block in out.split("-----------+-------------------------------------------------------"):
        lines = [l for l in block.strip().split("\n") if l.strip()]
        m = re.match(r"\s*([\d.]+)(ms|s)\s+", lines[0]) if lines else None
        if not m:
            continue
        v = float(m.group(1)) * (0.001 if m.group(2) == "ms" else 1)
        stack = "\n".join(lines)
        secs[next((name for name, frag in RULES if frag in stack), "other")] += v
    return secs


def main(args):
    if not args or len(args) % 2:
        sys.exit(__doc__)
    for binary, profile in zip(args[::2], args[1::2]):
        s = by_service(binary, profile)
        total = sum(s.values())
        parts = " ".join(f"{k} {v:.1f}" for k, v in sorted(s.items()))
        print(f"{profile}: total {total:.1f} s, {parts}, non-trainer {total - s['trainer']:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
