#!/usr/bin/env bash
# Packs the raw data of archived result folders (share/results/*) into one archive each: every
# JSON, log, CSV, binary and .err file under FOLDER goes into FOLDER/data.tgz (paths kept,
# relative to FOLDER) and is removed once the archive is in place and lists them all; READMEs,
# summaries, patches and scripts stay as they are. The folder's README.md gets a line saying
# where the data went. For folders whose figures are quoted and
# superseded: the tracked tree stays small, the evidence stays in the repository, byte for byte
# (share/tools/compact_package.py shrinks results files in place instead, dropping their
# per-sample rows).
#   usage: share/scripts/pack_results.sh FOLDER...
#   restore: tar -xzf FOLDER/data.tgz -C FOLDER
# Links into a packed folder from elsewhere (other READMEs, share/docs) are not rewritten: find
# them first. Exit status: 0 every folder packed or nothing to pack; 2 a bad argument (not a
# folder, or one that already has a data.tgz); 1 an archive that could not be written or read
# back (that folder is left as it was, the folders before it packed).
set -euo pipefail
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
  -*) echo "pack_results.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac
for folder in "$@"; do
  [[ -d $folder ]] || { echo "pack_results.sh: $folder is not a folder" >&2; exit 2; }
  [[ ! -e $folder/data.tgz ]] || { echo "pack_results.sh: $folder/data.tgz exists" >&2; exit 2; }
done
for folder in "$@"; do
  mapfile -d '' files < <(cd "$folder" && find . -type f \( -name '*.json' -o -name '*.log' \
    -o -name '*.csv' -o -name '*.bin' -o -name '*.err' \) -print0 | sort -z)
  if ((${#files[@]} == 0)); then
    echo "$folder: nothing to pack"
    continue
  fi
  before=$(du -sb "$folder" | cut -f1)
  # (Written beside, read back, then moved in: nothing is removed unless the archive in the
  # folder lists every file.)
  tmp=$(mktemp "${TMPDIR:-/tmp}/pack_results.XXXXXX")
  fail() { rm -f "$tmp"; echo "pack_results.sh: $folder: $1" >&2; exit 1; }
  tar -czf "$tmp" --owner=0 --group=0 --numeric-owner -C "$folder" --null \
    -T <(printf '%s\0' "${files[@]}") || fail "could not write the archive"
  listed=$(tar -tzf "$tmp" | wc -l) || fail "could not read the archive back"
  ((listed == ${#files[@]})) || fail "the archive lists $listed files of ${#files[@]}"
  mv "$tmp" "$folder/data.tgz" || fail "could not move the archive into the folder"
  chmod 644 "$folder/data.tgz"
  if ! (cd "$folder" && rm -f -- "${files[@]}"); then
    echo "pack_results.sh: $folder: data.tgz holds everything, some files could not be removed" >&2
    exit 1
  fi
  find "$folder" -mindepth 1 -type d -empty -delete
  note="Raw data (the JSON, logs, CSV and binary files this README and the folder's scripts name)"
  note+=" are packed in \`data.tgz\`: \`tar -xzf data.tgz\` in this folder puts them back where"
  note+=" they were."
  printf '\n%s\n' "$note" >>"$folder/README.md"
  after=$(du -sb "$folder" | cut -f1)
  echo "$folder: ${#files[@]} files packed, $((before / 1000)) kB -> $((after / 1000)) kB"
done
