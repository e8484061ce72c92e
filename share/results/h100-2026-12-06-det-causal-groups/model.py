#!/usr/bin/env python3
"""The schedule model behind the key-groups change (README.md here): the deterministic backward
under a causal mask, B = 1, H heads interleaved (key block 0 of every head, then key block 1, ...),
one CTA per key block, one CTA per SM, CTAs started in order as SMs free up.

A key block visits its query blocks from the last down (first_key_first); each visit is one
iteration of I. Its dQ add at a query block waits for the previous key block of its key group to
have added there, plus a hand-over h (release, then the acquire seen), and the consumers run at
most `stages` query blocks ahead of the adds. The default mode has no turns. Printed: default
time / deterministic time for 1, 2, 4, 6, 7 and 8 key groups.

    python3 model.py
"""
import heapq
import math


def makespan(seq, heads, block_m, block_n=128, sms=132, iteration=1.0, hand_over=1.0,
             stages=2, groups=1, deterministic=True, epilogue=2.0):
    query_blocks = math.ceil(seq / block_m)
    key_blocks = math.ceil(seq / block_n)
    per_group = math.ceil(key_blocks / groups)
    added = {}  # (head, group, query block, key block) -> when its add is visible
    free = [0.0] * sms
    end = 0.0
    for linear in range(key_blocks * heads):
        key_block, head = divmod(linear, heads)
        t = heapq.heappop(free) + epilogue / 2
        first = key_block * block_n // block_m
        group = key_block // per_group
        adds = []
        for k, query_block in enumerate(range(query_blocks - 1, first - 1, -1)):
            if deterministic and k >= stages:
                t = max(t, adds[k - stages])
            t += iteration
            if deterministic:
                before = key_block - 1
                waits = before >= group * per_group and before * block_n // block_m <= query_block
                ready = added[(head, group, query_block, before)] + hand_over if waits else t
                adds.append(max(t, ready))
                added[(head, group, query_block, key_block)] = adds[-1]
        finish = max(t + epilogue / 2, adds[-1] if adds else 0.0)
        heapq.heappush(free, finish)
        end = max(end, finish)
    return end


if __name__ == "__main__":
    for seq, block_m, name in [(1024, 128, "1k d64"), (2048, 128, "2k d64"), (4096, 128, "4k d64"),
                               (4096, 80, "4k d128"), (8192, 128, "8k d64"),
                               (8192, 80, "8k d128"), (16384, 80, "16k d128")]:
        default = makespan(seq, 8, block_m, deterministic=False)
        ratios = [f"G{g} {default / makespan(seq, 8, block_m, groups=g):.2f}"
                  for g in (1, 2, 4, 6, 7, 8)]
        print(f"{name}: " + "  ".join(ratios))
