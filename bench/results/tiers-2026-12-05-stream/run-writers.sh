#!/usr/bin/env bash
# The streamed write's pieces handed to a pool of eight writer threads (an uncommitted working-tree change on top of
# ea4732b, reverted after this run; bench/results/README.md describes it) against ea4732b itself, lossless with 4 and
# with 2 I/O threads, two interleaved pairs each.
A="$(dirname "$0")/ab_tiers.sh"
bash "$A" ea4732b 2 writers-t4- --codec lossless --threads 4
bash "$A" ea4732b 2 writers-t2- --codec lossless --threads 2
