#!/usr/bin/env bash
# Move a large file (a model's .gguf, a binary) to a machine that takes at most N MiB per transfer, in parts.
#
#   bash scripts/device_parts.sh split FILE DIR [PART_MIB]   # here: DIR/<name>.partNN + DIR/<name>.sha256
#   bash scripts/device_parts.sh join DIR NAME OUT           # there: check every part, concatenate, check the whole
#
# `split` cuts FILE into PART_MIB-MiB parts (default 54: one part plus this repository fit a 64 MiB device call)
# and writes a manifest with the sha256 of each part and of the whole file. Send the manifest and one part per
# call; `join` checks each part against the manifest (a missing or damaged part is named), concatenates them
# into OUT and checks OUT's sha256, removing OUT again on a mismatch. docs/gpu.md has the whole procedure.
set -euo pipefail
die() { echo "device_parts.sh: $*" >&2; exit 2; }
cmd=${1:-}
case "$cmd" in
  split)
    file=${2:?usage: device_parts.sh split FILE DIR [PART_MIB]}; dir=${3:?usage: device_parts.sh split FILE DIR [PART_MIB]}
    mib=${4:-54}
    [ -f "$file" ] || die "no such file: $file"
    [[ "$mib" =~ ^[1-9][0-9]*$ ]] || die "PART_MIB must be a positive integer, got '$mib'"
    name=$(basename "$file")
    mkdir -p "$dir"
    rm -f "$dir/$name".part*
    split -b "${mib}M" -d -a 2 "$file" "$dir/$name.part"
    whole=$(sha256sum < "$file" | cut -d' ' -f1)
    ( cd "$dir" && sha256sum "$name".part* > "$name.sha256" && echo "$whole  $name" >> "$name.sha256" )
    n=$(ls "$dir/$name".part* | wc -l)
    echo "split $file into $n parts of at most $mib MiB in $dir (manifest $dir/$name.sha256)"
    ;;
  join)
    dir=${2:?usage: device_parts.sh join DIR NAME OUT}; name=${3:?usage: device_parts.sh join DIR NAME OUT}
    out=${4:?usage: device_parts.sh join DIR NAME OUT}
    manifest="$dir/$name.sha256"
    [ -f "$manifest" ] || die "no manifest $manifest (copy it with the parts)"
    grep " $name\.part" "$manifest" > "$manifest.parts" || die "$manifest lists no parts of $name"
    ( cd "$dir" && sha256sum --quiet -c "$name.sha256.parts" ) || die "a part of $name is missing or damaged (above)"
    want=$(grep -E "  $name\$" "$manifest" | cut -d' ' -f1)
    [ -n "$want" ] || die "$manifest has no sha256 for the whole $name"
    cut -d' ' -f3 "$manifest.parts" | sed "s|^|$dir/|" | xargs cat > "$out"
    got=$(sha256sum "$out" | cut -d' ' -f1)
    rm -f "$manifest.parts"
    if [ "$got" != "$want" ]; then rm -f "$out"; die "$out: sha256 $got != $want (removed)"; fi
    echo "joined $(grep -c " $name\.part" "$manifest") parts into $out (sha256 $got ok)"
    ;;
  *) die "usage: device_parts.sh split FILE DIR [PART_MIB] | join DIR NAME OUT" ;;
esac
