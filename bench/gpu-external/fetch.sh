#!/bin/bash
# Fetches the external CUDA suite of the packing benchmark (issue 41):
# Rodinia 3.1's CUDA programs (University of Virginia; the multi-GPU and
# MIG CASE papers used them), from the GPU-only mirror on GitHub, at a
# pinned commit, into bench/gpu-external/rodinia/ (ignored by git: the
# project never carries their code). Only the programs that make their
# own inputs and give the same output on every run, alone or beside others
# under MPS, are taken (gaussian, srad_v2; docs/benchmarks.md says why the
# others are not).
#   bench/gpu-external/fetch.sh [GIT_DIR_OR_URL]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${1:-https://github.com/yuhc/gpu-rodinia}
COMMIT=9c10d3ea16ddba2ba057cc3951a9efc4c2cc18a4
DEST=$HERE/rodinia
rm -rf "$DEST"
mkdir -p "$DEST"
# File by file (a mirror may lack the large data files of other programs).
take() {
  local git=$1 f
  git -C "$git" cat-file -e "$COMMIT^{commit}" || { echo "fetch: $git lacks commit $COMMIT" >&2; return 1; }
  git -C "$git" ls-tree -r --name-only "$COMMIT" cuda/gaussian cuda/util cuda/srad/srad_v2 LICENSE |
    while read -r f; do
      mkdir -p "$DEST/$(dirname "$f")"
      # Output samples some mirrors lack are not needed.
      git -C "$git" show "$COMMIT:$f" >"$DEST/$f" 2>/dev/null || rm -f "$DEST/$f"
    done
}
if [ -d "$SRC" ]; then
  take "$SRC"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  git clone --quiet "$SRC" "$tmp/repo"
  take "$tmp/repo"
fi
for f in cuda/gaussian/gaussian.cu cuda/srad/srad_v2/srad.cu; do
  [ -s "$DEST/$f" ] || { echo "fetch: $f is missing from $SRC at $COMMIT" >&2; exit 1; }
done
echo "Rodinia at $COMMIT in $DEST"
