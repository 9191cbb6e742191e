#!/usr/bin/env bash
# PostgreSQL server binaries for the shared-manifest (fleet) tests: the tests start a throw-away
# cluster on loopback themselves (initdb + postgres as the `postgres` user), so no service runs.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" > /dev/null; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql > /dev/null
