#!/usr/bin/env bash
# Runs every bundled test binary (tools/gpu-bundle) under one compute-sanitizer tool, on a GPU
# machine, GPU tests included (`--include-ignored`).
#   bash tools/sanitize.sh memcheck|racecheck|synccheck [binary to leave out]...
# Run it from the repository (it finds target/gpu-bundle/bin) or as the bundle's own
# sanitize.sh (it finds bin/ beside itself).
# The fault-injection binary (test-gpu_poison) faults on purpose: leave it out.
# The sanitizer's default settings report every failing driver call, and cusched makes none on
# its normal paths. The one test that fails a driver call on purpose (an allocation beyond the
# device's memory, in test-gpu_faults) is skipped here: the sanitizer would rightly report it.
set -uo pipefail
tool=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
[[ -d $bin ]] || bin=$here/../target/gpu-bundle/bin
logs=${OUT:-/tmp/gpu-logs}/$tool; mkdir -p "$logs"
export CUSCHED_REQUIRE_GPU=1 CUSCHED_STRESS_JOBS=${CUSCHED_STRESS_JOBS:-4000} CUSCHED_PIPELINE_CHUNKS=${CUSCHED_PIPELINE_CHUNKS:-4}
bad=0; n=0
for t in "$bin"/test-*; do
  b=$(basename "$t")
  for skip in "$@"; do [[ "$b" == "$skip" ]] && continue 2; done
  compute-sanitizer --tool "$tool" --error-exitcode 9 "$t" --test-threads=1 --include-ignored \
    --skip gpu_allocation_beyond_device_memory_is_out_of_memory >"$logs/$b.log" 2>&1
  rc=$?; n=$((n+1))
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/$b.log" | tail -1)
  result=$(grep -E "^test result:" "$logs/$b.log" | tail -1)
  # Simulator-only binaries never call CUDA, so the sanitizer has nothing to check (and exits
  # non-zero saying so): count them as passed when their tests passed.
  if [[ -z "$summary" && "$result" == *" 0 failed"* ]]; then
    summary="no CUDA calls (simulator only)"; rc=0
  fi
  printf '%-28s rc=%s %s | %s\n' "$b" "$rc" "${summary:-no summary}" "$result"
  [[ $rc != 0 ]] && bad=$((bad+1))
done
echo "$tool: $n binaries, $bad with errors or failures"
[[ $bad == 0 ]]
