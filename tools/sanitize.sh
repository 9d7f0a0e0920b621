#!/usr/bin/env bash
# Runs the bundled test binaries (tools/gpu-bundle) under one compute-sanitizer tool, on a GPU
# machine, GPU tests included (`--include-ignored`): one sanitizer process per module of each
# binary (`gpu::blas`, `gpu::peer`, ...), so that a module that crashes or hangs is reported
# and the other modules still run.
#   bash tools/sanitize.sh memcheck|racecheck|synccheck [--only PART]... [PART to leave out]...
# A PART is a binary (`test-gpu`) or a module of one (`test-gpu::peer`); `--only` runs just the
# named parts (repeatable), and any other argument leaves that part out.
# Run it from the repository (it finds target/gpu-bundle/bin) or as the bundle's own
# sanitize.sh (it finds bin/ beside itself).
# Left out always: the fault-injection binary (test-gpu_poison), which faults on purpose, and
# test-nvtx_ranges (it builds a stand-in library with cargo; see run.sh). The sanitizer's
# default settings report every failing driver call, and cusched makes none on its normal
# paths. The tests that fail a driver call on purpose (an allocation beyond the device's
# memory, in gpu::faults; PTX that does not assemble, in gpu::modules; a module global of an
# unknown name, in gpu::module_globals; a pinned allocation that invalidates a graph capture,
# in gpu::graph) are skipped by name: the sanitizer would rightly report them.
set -uo pipefail
tool=${1:?usage: sanitize.sh memcheck|racecheck|synccheck [--only PART]... [PART to leave out]...}
shift
only=()
leave=(test-gpu_poison test-nvtx_ranges)
while (($#)); do
  case $1 in
  --only) only+=("${2:?--only needs a part}"); shift 2 ;;
  *) leave+=("$1"); shift ;;
  esac
done
skip_tests=(gpu_allocation_beyond_device_memory_is_out_of_memory ptx_that_does_not_assemble_is_a_compile_error_with_the_log
  a_global_of_an_unknown_name_is_refused_naming_it a_capture_the_driver_invalidates_fails_the_recording_and_the_process_goes_on)
# Device allocations are exact (CUSCHED_EXACT_ALLOCATIONS=1) for every part but NCCL's, so
# that an access even a byte past a buffer's end is reported: the 16-byte granule allocations
# otherwise take would hide up to 15 bytes.
# The `nccl` module of test-gpu keeps the granules (`granule_parts`): NCCL's kernels read a
# buffer's last partial word whole (4 bytes of a 3-byte buffer in its low-latency all-gather
# and in send/recv), which memcheck reports against an exact allocation and which ends the
# kernel. test-nccl_processes passes with exact allocations, so it keeps them. Both run with
# NCCL's own defaults (protocols and transports). The steady-state event count is skipped: a
# timing property that the sanitizer's slowdown breaks. NCCL's own API probes
# (`cudaErrorPeerAccessAlreadyEnabled` and `cudaErrorNoKernelImageForDevice` with libnccl.so
# as the innermost host frame) are counted apart under memcheck in the parts that run NCCL
# (`probe_parts`): such a part passes when they are all its errors.
skip_tests+=(nccl_collectives_in_steady_state_create_no_events)
# synccheck reports barrier divergence inside kernels NVIDIA's libraries launch for these tests
# (each run alone on an H200, CUDA 13.0): cuBLAS's `gemvx` kernel (the GEMM of a graph loop's
# body) and its `trsm_ln_up_kernel` (under cuSOLVER's refinement solves). The report ends the
# kernel and poisons the context, so they are left out of synccheck; memcheck still runs them.
# So is `gpu::cudnn_graph`: cuDNN's kernels overflow synccheck's table of tracked
# `cuda::barrier`s in its first test, and every launch after that fails; with a larger table
# (`--num-cuda-barriers 8192`) synccheck flags cuDNN's generated SDPA kernels, and reports
# thousands of errors in modules that pass with the default table.
if [[ $tool == synccheck ]]; then
  skip_tests+=(a_while_loop_body_may_hold_a_cublas_gemm gesv_refines_from_every_lower_precision_for_every_type
    irs_solves_every_type_under_every_setting)
  leave+=(test-gpu::cudnn_graph)
fi
granule_parts=(test-gpu::nccl)
probe_parts=(test-gpu::nccl test-nccl_processes)
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
[[ -d $bin ]] || bin=$here/../target/gpu-bundle/bin
logs=${OUT:-/tmp/gpu-logs}/$tool; mkdir -p "$logs"
export CUSCHED_REQUIRE_GPU=1 CUSCHED_STRESS_JOBS=${CUSCHED_STRESS_JOBS:-4000} CUSCHED_PIPELINE_CHUNKS=${CUSCHED_PIPELINE_CHUNKS:-4}

# Prints how many errors the sanitizer's log $1 reports in all, and how many of them are not
# NCCL's own: only `cudaErrorPeerAccessAlreadyEnabled` and `cudaErrorNoKernelImageForDevice`
# records whose innermost host frame is in libnccl.so are NCCL's; every other report (a memory
# error above all) counts against the run. Prints `-1 -1` unless the log has exactly one
# error summary.
nccl_own_errors() {
  awk '
    match($0, /========= ERROR SUMMARY: [0-9]+ errors?$/) {
      split(substr($0, RSTART), f, " "); total = f[4]; seen++; pending = 0; next
    }
    /========= Program hit (cudaErrorPeerAccessAlreadyEnabled|cudaErrorNoKernelImageForDevice) / { pending = 1; next }
    /========= [A-Z]/ && !/Saved host backtrace|COMPUTE-SANITIZER|Target application/ { pending = 0; next }
    pending && /Host Frame:/ { if ($0 ~ / in libnccl\.so[.0-9]*$/) nccl++; pending = 0 }
    END { if (seen != 1) print "-1 -1"; else printf "%d %d\n", total, total - nccl }' "$1"
}

# Runs part $1 (binary $2, then its tests up to `--`, then VAR=value settings for the run)
# under the tool; prints its line and counts it.
run_part() {
  local part=$1 t=$2; shift 2
  local names=() vars=()
  while (($#)) && [[ $1 != -- ]]; do names+=("$1"); shift; done
  shift
  vars=("$@")
  # `test-gpu.peer.log`: no colons in file names, which some copy tools refuse.
  local log=$logs/${part//::/.}.log rc summary result total ours
  env "${vars[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 1000000 "$t" --test-threads=1 \
    --include-ignored --exact "${names[@]}" >"$log" 2>&1
  rc=$?; n=$((n+1))
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  result=$(grep -E "^test result:" "$log" | tail -1)
  if [[ $tool == memcheck && $rc == 9 ]] && named "$part" "${probe_parts[@]}" && [[ "$result" == *" 0 failed"* ]]; then
    read -r total ours < <(nccl_own_errors "$log")
    if ((total > 0 && ours == 0)); then
      summary="$summary: all NCCL's own API probes (innermost host frame in libnccl.so)"; rc=0
    else
      summary="$summary ($ours not NCCL's own)"
    fi
  fi
  # Simulator-only tests never call CUDA, so the sanitizer has nothing to check (and exits
  # non-zero saying so): count them as passed when their tests passed.
  if [[ -z "$summary" && "$result" == *" 0 failed"* ]]; then
    summary="no CUDA calls (simulator only)"; rc=0
  fi
  printf '%-36s rc=%s %s | %s\n' "$part" "$rc" "${summary:-no summary}" "${result:-no test result, see $log}"
  [[ $rc != 0 ]] && bad=$((bad+1))
  return 0
}

# Whether part $1 (binary or binary::module) is named in the list that follows.
named() {
  local p=$1 x; shift
  for x in "$@"; do [[ $p == "$x" || $p == "$x::"* ]] && return 0; done
  return 1
}
# Whether part $1 is to run.
wanted() {
  named "$1" "${leave[@]}" && return 1
  ((${#only[@]} == 0)) && return 0
  local x
  for x in "${only[@]}"; do [[ $1 == "$x" || $1 == "$x::"* || $x == "$1::"* ]] && return 0; done
  return 1
}

bad=0; n=0
for t in "$bin"/test-*; do
  b=$(basename "$t")
  wanted "$b" || continue
  # Every test by its full name, but the skipped ones; grouped by module (the first segment of
  # the path; tests outside any module form one group, `-`). A binary that cannot even list its
  # tests counts as one failure.
  if ! list=$("$t" --list --include-ignored 2>&1); then
    printf '%-36s FAILED to list its tests: %s\n' "$b" "$(tail -1 <<<"$list")"
    n=$((n+1)); bad=$((bad+1)); continue
  fi
  mapfile -t tests < <(sed -n 's/: test$//p' <<<"$list" |
    awk -v skip="${skip_tests[*]}" 'BEGIN { n = split(skip, s, " ") }
      { for (i = 1; i <= n; i++) if (index($0, s[i])) next; print }')
  ((${#tests[@]})) || continue
  mapfile -t groups < <(printf '%s\n' "${tests[@]}" | sed -E 's/::.*//; t; s/.*/-/' | sort -u)
  for g in "${groups[@]}"; do
    [[ -n $g ]] || continue
    part=$b; [[ $g != - ]] && part=$b::$g
    wanted "$part" || continue
    if [[ $g == - ]]; then
      mapfile -t names < <(printf '%s\n' "${tests[@]}" | grep -v '::')
    else
      mapfile -t names < <(printf '%s\n' "${tests[@]}" | grep "^$g::")
    fi
    if named "$part" "${granule_parts[@]}"; then
      run_part "$part" "$t" "${names[@]}" -- CUSCHED_EXACT_ALLOCATIONS=0
    else
      run_part "$part" "$t" "${names[@]}" -- CUSCHED_EXACT_ALLOCATIONS=1
    fi
  done
done
echo "$tool: $n runs, $bad with errors or failures"
[[ $bad == 0 ]]
