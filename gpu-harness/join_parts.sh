# Sourced on the GPU machine by gpu-harness/wheels.sh and gpu-harness/ddtree_setup.sh. An archive too big to
# travel beside the tree in one call comes in parts over several warm calls (gpu-harness/split_carry.py
# ARCHIVE N): join_parts keeps every carried part (.gpu/NAME.partKofN) in $PARTS_DIR and, once all parts of
# a name are there, joins them into $JOIN_DIR/NAME (not again when it exists). Prints what it did.
join_parts() {
  local parts_dir=$1 join_dir=$2 p first base n name i
  local -a parts
  for p in .gpu/*.part[0-9]*of[0-9]*; do
    [ -f "$p" ] && mkdir -p "$parts_dir" && cp "$p" "$parts_dir/"
  done
  for first in "$parts_dir"/*.part1of*; do
    [ -f "$first" ] || continue
    base=${first%.part1of*}; n=${first##*of}; name=$(basename "$base")
    [ -f "$join_dir/$name" ] && continue
    parts=(); for i in $(seq 1 "$n"); do parts+=("$base.part${i}of$n"); done
    if ls "${parts[@]}" >/dev/null 2>&1; then
      mkdir -p "$join_dir"
      cat "${parts[@]}" > "$join_dir/$name.tmp" && mv "$join_dir/$name.tmp" "$join_dir/$name" \
        && echo "[parts] joined $name from $n parts"
    else
      echo "[parts] $name: $(ls "$base".part*of"$n" | wc -l) of $n parts here; carry the others in the next call"
    fi
  done
}
