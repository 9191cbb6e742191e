#!/usr/bin/env bash
# bench tiers --codec lossless (real SmolLM2 bf16 KV, O_DIRECT file tier, 4 threads) before (6260741) and after (the
# working tree: encode into a per-thread buffer, payload written while it is coded), three interleaved pairs.
# (The recorded run used an inline loop of the same order, with a worktree at /tmp/wt-old; see runlog.txt.)
bash "$(dirname "$0")/ab_tiers.sh" 6260741 3 "" --codec lossless
