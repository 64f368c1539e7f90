#!/usr/bin/env bash
# The GPU machine's side of a bundled transfer (docs/gpu.md): join the parts that `device_parts.sh split` cut
# from one tar bundle, unpack it, install the Python wheels it carries into a site folder and decompress
# the .xz files it carries (e.g. the opencode binary).
#
#   bash scripts/device_unpack.sh PARTS_DIR BUNDLE_NAME DEST [SITE]
#
# PARTS_DIR holds BUNDLE_NAME.partNN and BUNDLE_NAME.sha256; DEST receives the bundle's files; wheels found in
# DEST/*.whl (or DEST/whl/*.whl) are installed with `pip --no-index --no-deps --target SITE` (default
# /tmp/site: put it first on PYTHONPATH). The joined bundle is removed once unpacked (it is as large as the
# model it carries). Every step prints one line with its elapsed seconds.
set -euo pipefail
dir=${1:?usage: device_unpack.sh PARTS_DIR BUNDLE_NAME DEST [SITE]}
name=${2:?usage: device_unpack.sh PARTS_DIR BUNDLE_NAME DEST [SITE]}
dest=${3:?usage: device_unpack.sh PARTS_DIR BUNDLE_NAME DEST [SITE]}
site=${4:-/tmp/site}
here=$(cd "$(dirname "$0")" && pwd)
T0=$SECONDS
say() { echo "device_unpack [$(( SECONDS - T0 ))s]: $*"; }
mkdir -p "$dest" "$site"
bash "$here/device_parts.sh" join "$dir" "$name" "$dest/$name"
rm -f "$dir/$name".part*
tar -xf "$dest/$name" -C "$dest"
rm -f "$dest/$name"
say "unpacked $name into $dest"
shopt -s nullglob
wheels=("$dest"/*.whl "$dest"/whl/*.whl)
if (( ${#wheels[@]} )); then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}"
  say "installed ${#wheels[@]} wheels into $site"
fi
for f in "$dest"/*.xz; do
  xz -d -f "$f" 2>/dev/null || python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], 'wb'))" "$f"
  rm -f "$f"
  chmod +x "${f%.xz}"
  say "decompressed ${f%.xz}"
done
