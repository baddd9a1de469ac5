#!/usr/bin/env bash
# Download, on this machine (it needs PyPI), the wheels listed in envs/device-wheels.txt for a GPU
# machine without network: CPython 3.12, manylinux x86_64 (pure-Python wheels where a package has
# no binary one), no dependencies resolved (the list names each one). They land in .device-wheels/
# (git-ignored), which travels with the working tree when named as a carried path, and
# envs/gpu-campaign.sh installs them there offline. The script prints each wheel's size and the
# total, and fails when the total is over the limit (default 40 MiB; the whole tree that travels
# must stay under 64 MiB).
#
# When this machine has Debian's German-English dictionary (dict-de-en, /usr/share/dictd), its two
# files (about 23 MiB) are copied to .device-data/dictd/ (git-ignored) for Sketched-SGD's translation
# slice; carry that folder too, and envs/gpu-campaign.sh points GCBENCH_DICTD_DIR at it.
#
#   bash envs/fetch-device-wheels.sh            # into .device-wheels/ (and .device-data/dictd/)
#   DEST=/tmp/w LIMIT_MIB=40 bash envs/fetch-device-wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.device-wheels}
LIMIT_MIB=${LIMIT_MIB:-40}
PYTHON=${PYTHON:-python3}
mkdir -p "$DEST"
mapfile -t pins < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' envs/device-wheels.txt | grep -v '^$')
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$p")
done
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" -d "$DEST" "${pins[@]}"
# keep only the listed versions (an older download of another version would make two of one package)
"$PYTHON" - "$DEST" "${pins[@]}" <<'PY'
import re, sys
from pathlib import Path
dest, pins = Path(sys.argv[1]), sys.argv[2:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
want = {norm(p.split("==")[0]): p.split("==")[1] for p in pins}
total = 0
for w in sorted(dest.glob("*.whl")):
    name, version = w.name.split("-")[:2]
    if want.get(norm(name)) != version:
        print(f"removing {w.name} (not in envs/device-wheels.txt)")
        w.unlink()
        continue
    total += w.stat().st_size
    print(f"{w.stat().st_size / 2**20:8.2f} MiB  {w.name}")
missing = sorted(set(want) - {norm(w.name.split("-")[0]) for w in dest.glob("*.whl")})
if missing:
    sys.exit(f"missing wheels: {', '.join(missing)}")
print(f"{total / 2**20:8.2f} MiB  total, {len(want)} wheels in {dest}")
Path(dest, "TOTAL_MIB").write_text(f"{total / 2**20:.2f}\n")
PY
total=$(cat "$DEST/TOTAL_MIB")
if awk -v t="$total" -v l="$LIMIT_MIB" 'BEGIN { exit !(t > l) }'; then
    echo "the wheels take $total MiB, over the limit of $LIMIT_MIB MiB" >&2
    exit 1
fi
DICTD=${DICTD:-/usr/share/dictd}
if [ -f "$DICTD/german-english.index" ] && [ -f "$DICTD/german-english.dict.dz" ]; then
    mkdir -p .device-data/dictd
    cp -p "$DICTD/german-english.index" "$DICTD/german-english.dict.dz" .device-data/dictd/
    echo "copied the German-English dictionary to .device-data/dictd/ ($(du -sm .device-data/dictd | cut -f1) MiB)"
else
    echo "no German-English dictionary under $DICTD: Sketched-SGD's translation slice will say so on the GPU machine"
fi
