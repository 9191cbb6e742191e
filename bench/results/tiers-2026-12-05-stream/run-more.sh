#!/usr/bin/env bash
# After run.sh, the same old/new: the uncoded tier (random bytes, identity codec: the write path's refactor must cost
# nothing there) and the lossless tier with 2 I/O threads (one per core), two interleaved pairs each.
A="$(dirname "$0")/ab_tiers.sh"
bash "$A" 6260741 2 none-
bash "$A" 6260741 2 lossless-t2- --codec lossless --threads 2
