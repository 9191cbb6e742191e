#!/usr/bin/env bash
# FUSE for the power-loss tests (tests/reliability/test_power_loss.py): Debian's fuse3 brings
# libfuse3.so.3 (which mfusepy, a test requirement, binds with ctypes) and fusermount3. The
# tests mount and unmount their own filesystem (as root, through /dev/fuse). Idempotent.
set -euo pipefail
if command -v fusermount3 >/dev/null 2>&1 && ldconfig -p | grep -q 'libfuse3\.so\.3'; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends fuse3 > /dev/null
