# Sourced by the gpu_*_tables.sh scripts (needs $out, the log folder): `run NAME COMMAND...` writes
# the command's output to $out/NAME.log headed by the card and the command, prints NAME's exit
# status, and sets status=1 if it failed; the caller exits with $status.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
status=0
run() {
  local name=$1; shift
  { echo "# $card: $*"; "$@"; } > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc"
  [[ $rc -eq 0 ]] || status=1
}
