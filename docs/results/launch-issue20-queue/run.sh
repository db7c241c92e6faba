#!/usr/bin/env bash
# Launch pass, session start (old) against this session's end (new),
# interleaved old new new old old new, both priority policies.
# Usage: run.sh OLD_GSCHED NEW_GSCHED > runs.txt
set -euo pipefail
old=$1 new=$2
for b in old new new old old new; do
    g=$old; [ "$b" = new ] && g=$new
    for p in basic multifactor; do
        echo "== $b $p large"
        "$g" bench launch --nodes 1000 --gpus 8 --queued 100000 --rounds 20 --priority-type "$p"
        echo "== $b $p small"
        "$g" bench launch --nodes 1 --gpus 10 --queued 1000 --priority-type "$p"
    done
done
