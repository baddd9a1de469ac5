#!/usr/bin/env bash
# The one prepared command for a GPU machine: one NVIDIA H100 or H200, CPython 3.12 with torch
# (2.11, CUDA 13.0), torchvision, Triton, pytest and the other packages envs/device-wheels.txt
# names as present, and no network. It
#   1. installs the carried wheels (.device-wheels/) offline: pip --no-index --find-links, no deps;
#   2. installs gcbench from this tree, editable and without dependencies (with the carried
#      setuptools on PYTHONPATH for that one command when the machine's is older than 77);
#   3. runs `gcbench gpu-check --out $OUT/gpu --budget $BUDGET` (default 480 s: about 8 minutes; PARTS,
#      e.g. PARTS="cuda_tests asv", runs only those parts);
#   4. leaves in $OUT four files (the machine returns at most 8, two folders deep):
#      gpu-check.json and gpu-check.md (the summary), gpu-check.tar.gz (everything gpu-check wrote:
#      bench JSON, test logs, the hook's runs, the reproductions' reports without their cell
#      caches, asv's results) and campaign.log (this script's output).
#
# Before, on a machine with PyPI:  bash envs/fetch-device-wheels.sh   (fills .device-wheels/ and,
# where that machine has the German-English dictionary, .device-data/dictd/)
# Then on the GPU machine, from the repository root, with both folders carried and a time limit
# of at most 540 s, naming the commit being checked (the copied tree has no git history):
#     GCBENCH_COMMIT=<full commit hash> bash envs/gpu-campaign.sh
# Afterwards, unpack gpu-check.tar.gz into a folder named for the device and the run (e.g.
# results/gpu/h100/1-<commit>-all-parts/, which results/'s ignore rule lets through) and commit it
# with campaign.log; `gcbench results` then quotes it in README.md, and
# `gcbench results --asv-results .asv/results` (run by `tox -e bench` before `asv publish`) puts its
# asv results on the asv page.
# Exit status: gpu-check's (0: every part that ran passed; 1: a part failed), or 3 when gcbench
# itself could not be installed (a carried wheel that fails to install is reported and skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the folder whose files come back}"
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-480}
WHEELS=${WHEELS:-.device-wheels}
if [ -z "${GCBENCH_DICTD_DIR:-}" ] && [ -f .device-data/dictd/german-english.index ]; then
    export GCBENCH_DICTD_DIR=$PWD/.device-data/dictd
fi
export PYTHONUNBUFFERED=1 WANDB_MODE=${WANDB_MODE:-offline} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
LOG="$OUT/campaign.log"
mkdir -p "$OUT"
exec > >(tee "$LOG") 2>&1
echo "gpu-campaign: $(date -u +%FT%TZ) on $(hostname); budget $BUDGET s; commit ${GCBENCH_COMMIT:-unknown}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'

t0=$(date +%s)
wheels=$(ls "$WHEELS"/*.whl 2>/dev/null | grep -v '/setuptools-' || true)
if [ -n "$wheels" ]; then
    pip_offline=("$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile --find-links "$WHEELS")
    # shellcheck disable=SC2086
    if ! "${pip_offline[@]}" $wheels; then
        # one at a time, so one wheel that does not fit this machine costs only what needs it
        for w in $wheels; do "${pip_offline[@]}" "$w" || echo "gpu-campaign: could not install $w; going on"; done
    fi
else
    echo "gpu-campaign: no wheels in $WHEELS (run envs/fetch-device-wheels.sh first); going on without them"
fi
build_path=""
if ! "$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null; then
    build_path=$(mktemp -d)
    "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$build_path" \
        "$WHEELS"/setuptools-*.whl || { echo "gpu-campaign: no usable setuptools"; exit 3; }
fi
PYTHONPATH="$build_path${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pip install --quiet --disable-pip-version-check \
    --no-deps --no-build-isolation -e . || { echo "gpu-campaign: installing gcbench failed"; exit 3; }
"$PY" -c 'import gcbench, gcbench.compressors; print("gcbench from", gcbench.__file__)' || exit 3
echo "gpu-campaign: installed in $(( $(date +%s) - t0 )) s"

# the check ends itself within its budget; the outer limit only guards against a hang
part_args=()
for p in ${PARTS:-}; do part_args+=(--part "$p"); done
timeout --signal=TERM --kill-after=5 $((BUDGET + 15)) "$PY" -m gcbench.cli gpu-check --out "$OUT/gpu" --budget "$BUDGET" \
    "${part_args[@]}"
status=$?
echo "gpu-campaign: gpu-check exit status $status after $(( $(date +%s) - t0 )) s"

cp "$OUT/gpu/gpu-check.json" "$OUT/gpu/gpu-check.md" "$OUT/" 2>/dev/null || echo "gpu-campaign: gpu-check wrote no summary"
tar -czf "$OUT/gpu-check.tar.gz" -C "$OUT" --exclude=cells --exclude=wandb --exclude='*.pt' gpu \
    && rm -rf "$OUT/gpu"
ls -la "$OUT"
exit $status
