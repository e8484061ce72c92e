# Helpers of the measuring scripts in share/results/*/next/, sourced from the checkout's root:
# trees of the checkout or of a revision, with patches applied, their builds, the tool each
# built, ratios of two result folders (times; deterministic / default speeds) and the packing of
# what a run wrote. The caller sets ROOT (the checkout's root), O (the output folder, with logs/
# in it) and RATIOS (a ratios.py of a results package). O must be a folder of its own: pack()
# empties it.
if [[ -z ${O:-} || ! -d $O || $(cd "$O" && pwd) == "$(cd "${ROOT:-.}" && pwd)" ]]; then
  echo "patch_trees.sh: O ('${O:-}') must be an existing output folder, not the checkout" >&2
  exit 2
fi
SUMMARY=$O/summary.txt
say() { echo "$*" | tee -a "$SUMMARY"; }

# checkout_tree NAME [REV]: in build/NAME-src, the checkout's files as they are (tracked or not
# ignored), or those of revision REV. (Not `git archive HEAD` for the checkout, nor its index
# alone: a GPU machine's copy of the git history may stop before the newest commits, whose files
# it has all the same, and its index may still list files those commits moved.)
checkout_tree() {
  local src=build/$1-src
  rm -rf "$src" && mkdir -p "$src" || return 1
  if [[ -n ${2:-} ]]; then
    git archive "$2" | tar -x -C "$src"
  else
    git ls-files -z --cached --others --exclude-standard |
      while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
      tar --null -T - -c | tar -x -C "$src"
  fi
}

# tree NAME PATCH...: the checkout's files with the patches applied, in build/NAME-src.
tree() {
  local name=$1 src=build/$1-src
  shift
  [[ -x $src/build/gpu/app/cuflash ]] && return 0  # built by an earlier run on this machine
  checkout_tree "$name" || return 1
  # (From the checkout's root: git apply run inside the folder would look for the paths at the
  # root and skip them without a word.)
  for p in "$@"; do
    git apply --directory="$src" "$p" || { say "patch $p failed on $name"; return 1; }
  done
}

# build NAME JOBS TESTS(ON|OFF) TARGET...
build() {
  local src=build/$1-src began=$SECONDS
  local tests=()
  [[ $3 == OFF ]] && tests=(--no-tests)
  bash "$ROOT/share/scripts/build_gpu.sh" --source "$src" --jobs "$2" "${tests[@]}" "${@:4}" \
    >"$O/logs/build-$1.log" 2>&1
  say "build $1: rc $? $((SECONDS - began)) s"
}

cli() { echo "$ROOT/build/$1-src/build/gpu/app/cuflash"; }

# build_apps TREE...: the trees' tools (app only) built at once, 16 jobs shared among them (at
# least 4 each); fails, saying which, when a tree has no tool afterwards.
build_apps() {
  local t jobs=$((16 / $# > 4 ? 16 / $# : 4))
  for t in "$@"; do build "$t" "$jobs" OFF cuflash_app & done
  wait
  for t in "$@"; do [[ -x $(cli "$t") ]] || { say "the build of $t failed"; return 1; }; done
}
ratio() { say "$1: $(python3 $RATIOS "$O/$2" "$O/$3" "${@:4}" | tr '\n' ';')"; }
# mode_speed LABEL DEFAULT DETERMINISTIC [REGEX]...: the deterministic backward's speed relative
# to the default one, two folders of O (share/tools/mode_speed.py).
mode_speed() {
  say "$1: $(python3 share/tools/mode_speed.py "$O/$2" "$O/$3" "${@:4}" | tr '\n' ';')"
}
# Everything but summary.txt into all.tgz, one file to carry back from the GPU machine.
pack() {
  # (Written beside the folder, then moved in: tar reading the folder it writes into warns that
  # the folder changed and fails.)
  # (./summary.txt alone: a package's own summary.txt inside goes into the archive.)
  [[ -n $O && -d $O ]] || return 1
  (cd "$O" && tar -czf "$O.all.tgz" --exclude=./summary.txt . && mv "$O.all.tgz" all.tgz &&
     find . -mindepth 1 ! -path ./all.tgz ! -path ./summary.txt -delete)
}
