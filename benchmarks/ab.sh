#!/usr/bin/env bash
# A/B of the 1M-row MERGE between two checkouts (each with its own .venv; the benchmark file is
# generated once per checkout, or link benchmarks/data), alternating, ROUNDS times:
#   benchmarks/ab.sh BEFORE_DIR AFTER_DIR [ROUNDS] [extra run.py arguments...]
set -euo pipefail
before=$1 after=$2 rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
for round in $(seq 1 "$rounds"); do
    for side in before after; do
        dir=${!side}
        echo "=== round $round $side ($(git -C "$dir" log --oneline -1 | cut -c1-60)) $(date +%T)"
        (cd "$dir" && IMPORTER_BENCH_DB_SUFFIX="_$side" .venv/bin/python benchmarks/run.py \
            --rows 1000000 --skip-floor "$@" 2>&1 | grep -E "^importer import \(merge|^raw|^csv")
    done
done
