"""One rank of an EngramTables job, started by a launcher (engramlab launch,
torchrun): builds the tables through the runtime, checks its lookups against
reference_lookup (tables_check.py) and prints one line per layer. Exit 0
when every lookup was equal."""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engramlab  # noqa: E402
import tables_check  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny")
    p.add_argument("--tp", type=int, default=0)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--cpu-offload", action="store_true")
    p.add_argument("--peer-shards", action="store_true")
    p.add_argument("--ranks-per-gpu", type=int, default=1)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--expect-placement", required=True)
    p.add_argument("--step-tokens", help="comma-separated tokens of each rank's one step (0: an idle rank), looked "
                   "up from torch tensors made as a serving engine makes them, instead of the full check")
    a = p.parse_args()
    with engramlab.EngramTables(a.model, tp=a.tp, dp=a.dp, cpu_offload=a.cpu_offload, peer_shards=a.peer_shards,
                                ranks_per_gpu=a.ranks_per_gpu, tokens_per_rank_max=a.tokens) as tables:
        if tables.placement != a.expect_placement:
            print(f"rank {tables.rank}: placement {tables.placement}, expected {a.expect_placement}: "
                  f"{tables.facts['reason']}")
            return 1
        if a.step_tokens is not None:
            tokens = int(a.step_tokens.split(",")[tables.rank])
            lines = tables_check.check_one_step(tables, a.model, tokens, seed=tables.rank)
        else:
            check = tables_check.check_host if tables.device == "cpu" else tables_check.check_gpu
            lines = check(tables, a.model, a.tokens, seed=tables.rank)
        for line in lines:
            print(f"rank {tables.rank}/{tables.world_size} on {tables.device}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
