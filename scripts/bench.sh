#!/usr/bin/env bash
# What the interposer costs: one table, every row measured in this run against the same
# shim (release builds), each figure the median of --reps repetitions (the cases
# are interleaved within each repetition, so drift on a busy machine hits them alike).
# A benchmark, not a test: it asserts nothing about time, and a row whose prerequisite is
# missing (no trace support in the library, no `cuquota` CLI) reads "n/a (why)".
#
# Usage: scripts/bench.sh [--json PATH] [--reps N] [--report-events N] [--threads-only]
#   --json PATH         also write the table as JSON
#   --reps N            repetitions per measured case (default 5)
#   --report-events N   events in the generated trace for the report rows (default 10000000)
#   --threads-only      only the rows of threads and of group member processes
#
# Clients: bench/alloc_bench.c (alloc/free pairs, live allocations, threads, dlsym),
# bench/spawn_bench.c + bench/true.c (process start-up), bench/gen_trace.c (a synthetic
# trace). Peak memory comes from /usr/bin/time -v; without it (apt-get install time), from
# polling VmHWM in /proc/PID/status, which can miss a short final peak.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

json=""
threads_only=""
reps=5
report_events=10000000
while [ $# -gt 0 ]; do
    case $1 in
        --json) json=${2:?--json needs a path}; shift 2 ;;
        --reps) reps=${2:?}; shift 2 ;;
        --report-events) report_events=${2:?}; shift 2 ;;
        --threads-only) threads_only=1; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case $json in ""|/*) ;; *) json=$OLDPWD/$json ;; esac

# Loop sizes, chosen so that the whole script runs well under 3 minutes on 2 cores.
PAIRS=300000        # alloc+free pairs per pair run
LIVE=20000          # live allocations for the "live" rows
THREAD_PAIRS=1200000 # pairs per thread run, split over its threads
GROUP_PAIRS=400000  # pairs per member process in the group rows
DLSYM_CALLS=300000  # dlsym calls per run
SPAWNS=60           # process starts per repetition, each way
SMALL_REPORT=$((report_events / 10))
STACK_DEPTH=32      # CUQUOTA_STACKS for the stack rows
DEEP=30             # frames the deep rows add above the pair loop
LIMIT=6GiB

t_script=$(date +%s%N)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff-index --quiet HEAD -- 2>/dev/null || commit="$commit (+ uncommitted changes)"
cpu=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
echo "cuquota benchmark — $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs, ${cpu:-unknown CPU}; $(uname -sr)"
echo "commit:  $commit"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min; other work on the machine skews timings)"
echo "reps:    $reps (medians); pairs of cuMemAlloc_v2 + cuMemFree_v2, 4 KiB"

echo "building (release)…" >&2
cargo build -q --release --workspace >&2
shim_dir=$(scripts/shim.sh release)
lib=$root/target/release/libcuquota.so
audit=$root/target/release/libcuquota_audit.so
cli=$root/target/release/cuquota
out=$root/target/bench
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cuquota-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cc=${CC:-gcc}
$cc -O2 -Wall -o "$out/alloc_bench" bench/alloc_bench.c -ldl -lpthread
$cc -O2 -Wall -DLINKED -o "$out/alloc_bench_linked" bench/alloc_bench.c \
    -L"$shim_dir" -lcuda -ldl -lpthread
$cc -O2 -Wall -o "$out/spawn_bench" bench/spawn_bench.c
$cc -O2 -o "$out/true" bench/true.c
$cc -O2 -Wall -o "$out/gen_trace" bench/gen_trace.c
# The thread and process rows run against a stand-in whose allocations take no lock (the
# shim's take one global lock: its raw pairs do not scale with threads).
mkdir -p "$out/fake"
$cc -O2 -Wall -shared -fPIC -o "$out/fake/libcuda.so.1" bench/fake_driver.c -ldl
t_built=$(date +%s%N)

# ---- running and collecting ----------------------------------------------------------------

declare -A V   # "case.key" → the values of every repetition, space-separated
declare -A WHY # case → why it has no figures
add() { V[$1]="${V[$1]:-} $2"; }

RAW=(-u LD_PRELOAD -u CUQUOTA_LIMIT -u CUQUOTA_TRACE LD_LIBRARY_PATH="$shim_dir")
# Governed runs keep their state (registry, the group row's group) in the run's own directory.
QUOTA=(-u LD_PRELOAD -u CUQUOTA_TRACE -u CUQUOTA_GROUP LD_LIBRARY_PATH="$shim_dir" LD_PRELOAD="$lib"
       CUQUOTA_LIMIT=$LIMIT CUQUOTA_STATE_DIR="$tmp/state")

# The same on the lock-free stand-in (bench/fake_driver.c).
RAW_FAKE=("${RAW[@]}" LD_LIBRARY_PATH="$out/fake")
QUOTA_FAKE=("${QUOTA[@]}" LD_LIBRARY_PATH="$out/fake")

# run_case NAME ENV... -- COMMAND...: runs it once and adds its "key value" lines.
run_case() {
    local name=$1 envs=() result rc
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    if result=$(env "${envs[@]}" "$@" 2>"$tmp/$name.err"); then
        while read -r k v; do [ -n "$k" ] && add "$name.$k" "$v"; done <<<"$result"
    else
        rc=$?
        WHY[$name]="exit $rc: $(tail -n1 "$tmp/$name.err" | cut -c1-60)"
    fi
}

median() {
    local vals=${V[$1]:-}
    [ -n "${vals// /}" ] || return 0
    tr ' ' '\n' <<<"$vals" | grep -v '^$' | sort -g |
        awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# After a traced run: bytes per event and dropped events, from the file and its summary.
trace_stats() {
    local file=$1 summary events dropped size
    [ -s "$file" ] || { WHY[trace]="no trace file written (trace not in this build?)"; return; }
    size=$(stat -c %s "$file")
    summary=$(tail -n1 "$file")
    if [[ $summary == *'"type":"summary"'* ]]; then
        events=$(sed -n 's/.*"events":\([0-9]*\).*/\1/p' <<<"$summary")
        dropped=$(sed -n 's/.*"dropped":\([0-9]*\).*/\1/p' <<<"$summary")
    else
        events=$(($(wc -l <"$file") - 1))
        dropped=$(sed -n 's/.* \([0-9]*\) events dropped.*/\1/p' "$tmp/trace.err" | tail -n1)
    fi
    add trace.dropped "${dropped:-0}"
    add trace.dropped_pct "$(awk -v d="${dropped:-0}" -v e="${events:-0}" 'BEGIN {print (d + e > 0) ? 100 * d / (d + e) : 0}')"
    if [ "${events:-0}" -gt 0 ]; then
        add trace.bytes_per_event "$(awk -v s="$size" -v e="$events" 'BEGIN {print s / e}')"
    fi
    rm -f "$file"*
}

# alternate RAWENV QUOTAENV RAWNAME QUOTANAME ARGS...: the same client without and with the
# interposer (environments: the names of two arrays), in an order that alternates between
# repetitions (so neither always runs first).
alternate() {
    local -n raw_env=$1 quota_env=$2
    local r=$3 q=$4
    shift 4
    if [ $((rep % 2)) = 1 ]; then
        run_case "$r" "${raw_env[@]}" -- "$@"
        run_case "$q" "${quota_env[@]}" -- "$@"
    else
        run_case "$q" "${quota_env[@]}" -- "$@"
        run_case "$r" "${raw_env[@]}" -- "$@"
    fi
}
# both RAWNAME QUOTANAME ARGS...: on the shim; both_fake: on the lock-free stand-in.
both() { alternate RAW QUOTA "$@"; }
both_fake() { alternate RAW_FAKE QUOTA_FAKE "$@"; }

# members NAME P ENV...: P processes of `alloc_bench pair` at once on the stand-in (their
# start-up, a few ms, is small beside a run); adds NAME.pair_ns, the median over them.
members() {
    local name=$1 p=$2 i pids=() ns
    shift 2
    for i in $(seq "$p"); do
        env "$@" "$out/alloc_bench" pair dlsym $GROUP_PAIRS >"$tmp/$name.$i" 2>"$tmp/$name.err" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do
        if ! wait "$i"; then WHY[$name]="a member failed: $(tail -n1 "$tmp/$name.err" | cut -c1-50)"; fi
    done
    ns=$(cat "$tmp/$name".[0-9]* | awk '/^pair_ns/ {print $2}' | sort -g |
        awk '{a[NR] = $1} END {if (NR) print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
    rm -f "$tmp/$name".[0-9]*
    [ -n "$ns" ] && add "$name.pair_ns" "$ns"
}

thread_rows() {
    for t in 1 2 4 8; do
        both_fake raw_t$t quota_t$t "$out/alloc_bench" threads dlsym $t $((THREAD_PAIRS / t))
        both_fake raw_s$t quota_s$t "$out/alloc_bench" streamthreads dlsym $t $((THREAD_PAIRS / t))
    done
    for p in 2 4 8; do
        if [ $((rep % 2)) = 1 ]; then
            members solo_p$p "$p" "${QUOTA_FAKE[@]}"
            members group_p$p "$p" "${QUOTA_FAKE[@]}" CUQUOTA_GROUP=bench$p
        else
            members group_p$p "$p" "${QUOTA_FAKE[@]}" CUQUOTA_GROUP=bench$p
            members solo_p$p "$p" "${QUOTA_FAKE[@]}"
        fi
    done
}

for rep in $(seq "$reps"); do
    echo "repetition $rep/$reps…" >&2
    if [ -n "$threads_only" ]; then
        thread_rows
        continue
    fi
    both raw quota "$out/alloc_bench" pair dlsym $PAIRS
    run_case trace "${QUOTA[@]}" CUQUOTA_TRACE="$tmp/trace.jsonl" -- \
        "$out/alloc_bench" pair dlsym $PAIRS
    trace_stats "$tmp/trace.jsonl"
    # Call stacks (CUQUOTA_STACKS): the pair as it is (a shallow stack), and 30 frames down.
    run_case stacks "${QUOTA[@]}" CUQUOTA_TRACE="$tmp/stacks.jsonl" CUQUOTA_STACKS=$STACK_DEPTH -- \
        "$out/alloc_bench" pair dlsym $PAIRS
    run_case stacks_deep "${QUOTA[@]}" CUQUOTA_TRACE="$tmp/stacks.jsonl" CUQUOTA_STACKS=$STACK_DEPTH -- \
        "$out/alloc_bench" deeppair dlsym $PAIRS $DEEP
    run_case trace_deep "${QUOTA[@]}" CUQUOTA_TRACE="$tmp/stacks.jsonl" -- \
        "$out/alloc_bench" deeppair dlsym $PAIRS $DEEP
    rm -f "$tmp/stacks.jsonl"*
    both raw_linked quota_linked "$out/alloc_bench_linked" pair linked $PAIRS
    both raw_getproc quota_getproc "$out/alloc_bench" pair getproc $PAIRS
    both raw_async quota_async "$out/alloc_bench" asyncpair dlsym $PAIRS
    run_case quota_group "${QUOTA[@]}" CUQUOTA_GROUP=bench -- "$out/alloc_bench" pair dlsym $PAIRS
    both raw_live quota_live "$out/alloc_bench" live dlsym $LIVE 1
    thread_rows
    both dlsym_without dlsym_with "$out/alloc_bench" dlsym-other $DLSYM_CALLS
    run_case start -u LD_PRELOAD CUQUOTA_LIMIT=$LIMIT -- \
        "$out/spawn_bench" $SPAWNS "$out/true" "$lib"
    # The audit module (LD_AUDIT, what `cuquota run` sets): start-up, and pairs through the
    # exported symbols (the bindings it sees; each is redirected once, at binding).
    run_case start_audit -u LD_PRELOAD CUQUOTA_LIMIT=$LIMIT -- \
        "$out/spawn_bench" $SPAWNS "$out/true" "$lib" LD_AUDIT="$audit"
    run_case quota_linked_audit "${QUOTA[@]}" LD_AUDIT="$audit" -- \
        "$out/alloc_bench_linked" pair linked $PAIRS
done
t_micro=$(date +%s%N)

# ---- instruction counts (callgrind: repeatable where timings are noisy) ------------------

# cg_count NAME N ENV...: instructions of `alloc_bench pair dlsym N`, per object, on the
# calling thread: V[NAME.N.lib] libcuquota.so, .drv the shim, .ld the dynamic
# loader (TLS lookups); .w everything on the trace writer thread. libc is left out: the
# shim's malloc takes a different path depending on heap layout (± 250 per pair).
# CG_MODE (default pair): the alloc_bench case, e.g. asyncpair for the stream-ordered pair.
cg_count() {
    local name=$1 n=$2 f
    shift 2
    f=$tmp/cg.$name.$n
    env "$@" valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$f" \
        "$out/alloc_bench" "${CG_MODE:-pair}" dlsym "$n" ${CG_EXTRA:-} >/dev/null 2>&1 || return 0
    if [ -f "$f-01" ]; then
        awk -f bench/cg_objects.awk "$f-01" >"$f.objects"
        add "cg.$name.$n.lib" "$(awk '/libcuquota\.so/ {s += $1} END {print s + 0}' "$f.objects")"
        add "cg.$name.$n.drv" "$(awk '/shim\/libcuda/ {s += $1} END {print s + 0}' "$f.objects")"
        add "cg.$name.$n.ld" "$(awk '/ld-linux/ {s += $1} END {print s + 0}' "$f.objects")"
        # libgcc's unwinder (CUQUOTA_STACKS)
        add "cg.$name.$n.gcc" "$(awk '/libgcc_s/ {s += $1} END {print s + 0}' "$f.objects")"
    fi
    # The trace writer: the busiest thread besides the calling one (the watcher thread, also
    # started at the first CUDA call, idles).
    if [ -f "$f-02" ]; then
        add "cg.$name.$n.w" "$(awk '/^totals:/ {if ($2 > m) m = $2} END {print m + 0}' "$f"-0[2-9])"
    fi
    rm -f "$f"*
}
CG_N1=10000 CG_N2=20000
if [ -n "$threads_only" ]; then
    WHY[cg]="--threads-only"
elif command -v valgrind >/dev/null; then
    echo "instruction counts (callgrind)…" >&2
    for n in $CG_N1 $CG_N2; do
        cg_count raw $n "${RAW[@]}"
        cg_count quota $n "${QUOTA[@]}"
        cg_count trace $n "${QUOTA[@]}" CUQUOTA_TRACE="$tmp/cg-trace.jsonl"
        cg_count audit $n "${QUOTA[@]}" LD_AUDIT="$audit"
        cg_count group $n "${QUOTA[@]}" CUQUOTA_GROUP=bench
        rm -f "$tmp/cg-trace.jsonl"*
        # the stream-ordered pair (cuMemAllocAsync + cuMemFreeAsync, NULL stream)
        CG_MODE=asyncpair cg_count rawasync $n "${RAW[@]}"
        CG_MODE=asyncpair cg_count quotaasync $n "${QUOTA[@]}"
        cg_count stacks $n "${QUOTA[@]}" CUQUOTA_TRACE="$tmp/cg-trace.jsonl" CUQUOTA_STACKS=$STACK_DEPTH
        CG_MODE=deeppair CG_EXTRA=$DEEP cg_count stacksdeep $n "${QUOTA[@]}" \
            CUQUOTA_TRACE="$tmp/cg-trace.jsonl" CUQUOTA_STACKS=$STACK_DEPTH
        rm -f "$tmp/cg-trace.jsonl"*
    done
else
    WHY[cg]="valgrind not installed"
fi

# ---- report / export on a generated trace ------------------------------------------------

# timed_rss COMMAND...: runs COMMAND (stdout to /dev/null); prints "WALL_NS RSS_KIB CPU_NS"
# (CPU = user + system; the wall time when /usr/bin/time is missing).
timed_rss() {
    local t0 t1 rss=0 pid hwm cpu
    t0=$(date +%s%N)
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -v -o "$tmp/time.txt" "$@" >/dev/null 2>"$tmp/cmd.err" || return 1
        t1=$(date +%s%N)
        rss=$(awk -F': *' '/Maximum resident set size/ {print $2}' "$tmp/time.txt")
        cpu=$(awk -F': *' '/(User|System) time \(seconds\)/ {s += $2} END {printf "%.0f", s * 1e9}' "$tmp/time.txt")
    else
        "$@" >/dev/null 2>"$tmp/cmd.err" &
        pid=$!
        while kill -0 "$pid" 2>/dev/null; do
            hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
            [ -n "$hwm" ] && [ "$hwm" -gt "$rss" ] && rss=$hwm
            sleep 0.02
        done
        wait "$pid" || return 1
        t1=$(date +%s%N)
        cpu=$((t1 - t0))
    fi
    echo "$((t1 - t0)) $rss $cpu"
}

# report_case NAME EVENTS FILE COMMAND...: events/s and peak RSS of one run.
report_case() {
    local name=$1 events=$2 r
    shift 2
    local wall rss cpu
    if r=$(timed_rss "$@"); then
        read -r wall rss cpu <<<"$r"
        add "$name.events_per_s" "$(awk -v w="$wall" -v e="$events" 'BEGIN {printf "%.0f", e * 1e9 / w}')"
        add "$name.events_per_cpu_s" "$(awk -v w="$cpu" -v e="$events" 'BEGIN {printf "%.0f", e * 1e9 / (w > 0 ? w : 1)}')"
        add "$name.rss_kib" "$rss"
    else
        WHY[$name]="failed: $(tail -n1 "$tmp/cmd.err" | cut -c1-60)"
    fi
}

if [ -n "$threads_only" ]; then
    WHY[report]="--threads-only"
elif ! "$cli" report --help >/dev/null 2>&1; then
    WHY[report]="no \`cuquota report\` in this build"
elif ! "$out/gen_trace" "$report_events" "$tmp/big.jsonl" >/dev/null ||
     ! "$out/gen_trace" "$SMALL_REPORT" "$tmp/small.jsonl" >/dev/null; then
    WHY[report]="could not generate the trace (disk space in ${TMPDIR:-/tmp}?)"
else
    echo "report/export on $report_events generated events…" >&2
    trace_bytes=$(stat -c %s "$tmp/big.jsonl")
    report_case report_small "$SMALL_REPORT" "$cli" report "$tmp/small.jsonl"
    report_case report "$report_events" "$cli" report "$tmp/big.jsonl"
    if "$cli" export --help >/dev/null 2>&1; then
        report_case export_small "$SMALL_REPORT" "$cli" export --format chrome "$tmp/small.jsonl" -o "$tmp/small.json"
        rm -f "$tmp/small.json"
        report_case export "$report_events" "$cli" export --format chrome "$tmp/big.jsonl" -o "$tmp/big.json"
        rm -f "$tmp/big.json"
    else
        WHY[export]="no \`cuquota export\` in this build"
    fi
    rm -f "$tmp/big.jsonl" "$tmp/small.jsonl"
fi
t_end=$(date +%s%N)

# ---- the table -------------------------------------------------------------------------------

R_CASE=() R_VALUE=() R_UNIT=() R_RAW=() R_OVER=() R_RATIO=() R_TARGET=() R_RESULT=()

calc() { awk "BEGIN {printf \"%.${2:-1}f\", $1}"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}'; }

# row CASE VALUE UNIT RAW TARGET RESULT: RAW (may be empty) gives "over raw" and the ratio.
row() {
    local over="" ratio=""
    if [ -n "$2" ] && [ -n "$4" ]; then
        over=$(calc "$2 - $4")
        ratio=$(calc "$2 / $4" 2)
    fi
    R_CASE+=("$1") R_VALUE+=("$2") R_UNIT+=("$3") R_RAW+=("$4") R_OVER+=("$over")
    R_RATIO+=("$ratio") R_TARGET+=("$5") R_RESULT+=("$6")
}
na() { row "$1" "" "" "" "$2" "n/a (${3:-missing})"; }
verdict() { if le "$1" "$2"; then echo PASS; else echo MISS; fi; }

# spread NAME RAWNAME: the lowest and highest of (NAME − RAWNAME) over the repetitions,
# each repetition's pair measured side by side.
spread() {
    paste <(tr ' ' '\n' <<<"${V[$1.pair_ns]:-}" | grep -v '^$') \
        <(tr ' ' '\n' <<<"${V[$2.pair_ns]:-}" | grep -v '^$') |
        awk 'NF == 2 {d = $1 - $2; if (n++ == 0 || d < lo) lo = d; if (n == 1 || d > hi) hi = d}
             END {if (n) printf "reps %+.1f…%+.1f", lo, hi}'
}

# A pair row: CASE NAME RAWNAME [LIMIT_NS]; the spread of what it adds, by repetition.
pair_row() {
    local v r target="" result=""
    v=$(median "$2.pair_ns") r=$(median "$3.pair_ns")
    if [ -n "${4:-}" ]; then target="≤ $4 ns over raw"; fi
    if [ -z "$v" ] || [ -z "$r" ]; then
        na "$1" "$target" "${WHY[$2]:-${WHY[$3]:-no figures}}"
        return
    fi
    if [ -n "${4:-}" ]; then result="$(verdict "$(calc "$v - $r")" "$4") "; fi
    row "$1" "$v" ns/pair "$r" "$target" "$result($(spread "$2" "$3"))"
}

if [ -z "$threads_only" ]; then
raw=$(median raw.pair_ns)
if [ -n "$raw" ]; then row "raw (dlsym, no interposer)" "$raw" ns/pair "" "" ""; else na "raw" "" "${WHY[raw]:-}"; fi
pair_row "quota, trace off" quota raw 50
if [ -n "${WHY[trace]:-}" ]; then
    na "quota, trace on" "≤ 300 ns over raw" "${WHY[trace]}"
else
    pair_row "quota, trace on" trace raw 300
    # Dropped events make a run cheaper: say in how many runs, and the worst.
    lossy=$(tr ' ' '\n' <<<"${V[trace.dropped_pct]:-}" | awk '$1 > 0 {n++; if ($1 > m) m = $1} END {if (n) printf "%d of %d runs dropped events (up to %.1f%%)", n, '"$reps"', m}')
    if [ -n "$lossy" ]; then R_RESULT[-1]="${R_RESULT[-1]}; $lossy"; fi
fi
pair_row "quota, trace on, stacks ($STACK_DEPTH frames)" stacks raw
pair_row "quota, trace on, $DEEP frames deeper" trace_deep raw
pair_row "quota, trace on, stacks, $DEEP frames deeper" stacks_deep raw
pair_row "lookup: exported symbols" quota_linked raw_linked 50
pair_row "lookup: exported symbols, LD_AUDIT on" quota_linked_audit raw_linked 50
pair_row "lookup: dlsym" quota raw 50
pair_row "lookup: cuGetProcAddress_v2" quota_getproc raw_getproc 50
pair_row "group member (CUQUOTA_GROUP)" quota_group raw
pair_row "stream-ordered pair (async, NULL stream)" quota_async raw_async

one=$(median quota_live.free1_ns)
raw_one=$(median raw_live.free1_ns)
if [ -n "$one" ] && [ -n "$raw_one" ]; then
    row "free, 1 live" "$one" ns/free "$raw_one" "" ""
    added_one=$(calc "$one - $raw_one")
    for order in newest oldest; do
        v=$(median "quota_live.free_${order}_ns") r=$(median "raw_live.free_${order}_ns")
        # Judged on what the interposer adds (the shim's own free slows down with many
        # live blocks: cache and TLB misses); the plain ratio is shown too.
        added=$(calc "$v - $r")
        x=$(calc "$added / ($added_one > 10 ? $added_one : 10)" 2)
        row "free, $LIVE live, $order-first" "$v" ns/free "$r" \
            "added ≤ 1.5× added at 1 live (${added} vs ${added_one} ns: ${x}×; total $(calc "$v / $one" 2)× 1 live)" \
            "$(verdict "$x" 1.5)"
    done
else
    na "free, 1 live / $LIVE live" "≤ 1.5× 1 live" "${WHY[quota_live]:-${WHY[raw_live]:-}}"
fi

for kind in default handle; do
    label=$([ $kind = default ] && echo 'dlsym(RTLD_DEFAULT, "strlen")' || echo 'dlsym(libc, "strlen")')
    v=$(median "dlsym_with.dlsym_${kind}_ns") r=$(median "dlsym_without.dlsym_${kind}_ns")
    if [ -z "$v" ] || [ -z "$r" ]; then na "$label" "≤ 1.2× without" "${WHY[dlsym_with]:-${WHY[dlsym_without]:-}}"; continue; fi
    row "$label" "$v" ns/call "$r" "≤ 1.2× without" "$(verdict "$(calc "$v / $r" 3)" 1.2)"
done

v=$(median start.start_with_ns) r=$(median start.start_without_ns)
if [ -n "$v" ] && [ -n "$r" ]; then
    row "start-up (dynamic true)" "$(calc "$v / 1000")" µs "$(calc "$r / 1000")" "≤ 1000 µs added" \
        "$(verdict "$(calc "($v - $r) / 1000")" 1000)"
else
    na "start-up" "≤ 1000 µs added" "${WHY[start]:-}"
fi

v=$(median start_audit.start_with_ns) r=$(median start_audit.start_without_ns)
if [ -n "$v" ] && [ -n "$r" ]; then
    row "start-up with LD_AUDIT (dynamic true)" "$(calc "$v / 1000")" µs "$(calc "$r / 1000")" \
        "≤ 1000 µs added" "$(verdict "$(calc "($v - $r) / 1000")" 1000)"
else
    na "start-up with LD_AUDIT" "≤ 1000 µs added" "${WHY[start_audit]:-}"
fi

if [ -n "${WHY[trace]:-}" ]; then
    na "trace size" "≤ 160 B/event" "${WHY[trace]}"
else
    v=$(median trace.bytes_per_event)
    row "trace size" "$(calc "$v")" bytes/event "" "≤ 160 B/event" "$(verdict "$v" 160)"
fi

# Instructions per pair: the difference between runs of N1 and N2 pairs (each run also
# does a warm-up of a tenth), so start-up and exit cancel out.
cg_per() { # NAME PART → per pair
    local a b
    a=$(median "cg.$1.$CG_N1.$2") b=$(median "cg.$1.$CG_N2.$2")
    if [ -n "$a" ] && [ -n "$b" ]; then calc "($b - $a) / (1.1 * ($CG_N2 - $CG_N1))" 0; fi
}
# The interposer's share of a pair: its own code, plus what it adds in the driver (its
# current-device query) and in the loader (thread-local lookups), over the raw run.
cg_interposer() {
    local lib drv ld
    lib=$(cg_per "$1" lib) drv=$(cg_per "$1" drv) ld=$(cg_per "$1" ld)
    if [ -n "$lib" ] && [ -n "$drv" ] && [ -n "$raw_drv" ]; then
        calc "$lib + ($drv - $raw_drv) + ($ld - $raw_ld)" 0
    fi
}
if [ -n "${WHY[cg]:-}" ]; then
    na "instructions/pair (callgrind)" "" "${WHY[cg]}"
else
    raw_drv=$(cg_per raw drv) raw_ld=$(cg_per raw ld)
    off=$(cg_interposer quota)
    on=$(cg_interposer trace)
    w=$(cg_per trace w)
    plain_lib=$(cg_per quota lib)
    if [ -n "$off" ]; then
        row "interposer instructions/pair, trace off" "$off" instr/pair "" \
            "$plain_lib in libcuquota.so itself: ≤ 350" "$(verdict "$plain_lib" 350)"
    fi
    if [ -n "$on" ]; then
        row "interposer instructions/pair, trace on" "$on" instr/pair "" \
            "(calling thread; system calls not counted)" ""
    fi
    audit_on=$(cg_interposer audit)
    if [ -n "$audit_on" ]; then
        row "interposer instructions/pair, LD_AUDIT on" "$audit_on" instr/pair "" \
            "(dlsym path; the audit module costs nothing per call)" ""
    fi
    group=$(cg_interposer group)
    if [ -n "$group" ]; then
        row "interposer instructions/pair, group member" "$group" instr/pair "" \
            "(CUQUOTA_GROUP; $(cg_per group lib) in libcuquota.so itself)" ""
    fi
    if [ -n "$w" ]; then row "trace writer thread" "$(calc "$w / 2" 0)" instr/event "" "" ""; fi
    # Call stacks: the interposer's share plus libgcc's unwinder, over the trace-on pair.
    for c in stacks stacksdeep; do
        v=$(cg_interposer $c) g=$(cg_per $c gcc)
        if [ -n "$v" ] && [ -n "$g" ] && [ -n "$on" ]; then
            what="shallow stack"
            [ $c = stacksdeep ] && what="$DEEP frames deeper"
            row "instructions/pair, stacks ($STACK_DEPTH frames), $what" "$(calc "$v + $g" 0)" instr/pair "$on" \
                "(calling thread: $(cg_per $c lib) libcuquota.so, $g libgcc_s unwinder; raw = trace on, no stacks)" ""
        fi
    done
    # The stream-ordered pair (cuMemAllocAsync + cuMemFreeAsync, NULL stream) over its own
    # raw run (its stream → device lookup included).
    raw_drv=$(cg_per rawasync drv) raw_ld=$(cg_per rawasync ld)
    async=$(cg_interposer quotaasync)
    if [ -n "$async" ]; then
        async_lib=$(cg_per quotaasync lib)
        row "interposer instructions/pair, async pair" "$async" instr/pair "" \
            "$async_lib in libcuquota.so itself: ≤ 1.3× the plain pair's" \
            "$(verdict "$(calc "$async_lib / $plain_lib" 2)" 1.3) ($(calc "$async_lib / $plain_lib" 2)×)"
    fi
fi

# report_row CASE NAME: events/s over 10M events, and whether peak memory stayed flat
# (the 10M-event run within 1.5× the peak of the 1M-event run).
report_row() {
    local eps rss small x mib
    if [ -n "${WHY[report]:-}" ] || [ -n "${WHY[$2]:-}" ]; then
        na "$1" "≥ 1 M events/s, flat memory" "${WHY[report]:-${WHY[$2]}}"
        return
    fi
    eps=$(median "$2.events_per_s") rss=$(median "$2.rss_kib") small=$(median "$2_small.rss_kib")
    cps=$(median "$2.events_per_cpu_s")
    [ -n "$small" ] || small=$rss
    mib=$(calc "$rss / 1024" 0)
    x=$(calc "$rss / ($small + 1)" 2)
    # Judged on CPU time: on a shared machine the wall clock also counts waiting for a core.
    local result=PASS target="≥ 1 M events/s of CPU, flat memory"
    if [ "$2" = report ]; then le 1000000 "$cps" || result=MISS; else target="flat memory"; fi
    le "$x" 1.5 || result=MISS
    row "$1 ($(awk -v n="$report_events" 'BEGIN {printf "%g", n / 1e6}') M events, $(calc "$trace_bytes / 1048576" 0) MiB)" \
        "$(calc "$eps / 1e6" 2)" "M events/s" "" \
        "$target ($(calc "$cps / 1e6" 2) M/s of CPU; peak $mib MiB, ${x}× the 1/10 file's)" "$result"
}
report_row "cuquota report" report
report_row "cuquota export --format chrome" export

fi
# Threads, on the lock-free stand-in: ns per pair as each thread sees it = wall ×
# min(threads, CPUs) / all pairs (with more threads than CPUs: the CPU time of a pair),
# equal to the 1-thread figure if threads scale; "added" = under cuquota − raw. The aim:
# what cuquota adds per pair with 2 threads within 1.5× what it adds with 1.
cpus=$(nproc)
per_core() { calc "$1 * ($2 < $cpus ? $2 : $cpus)"; }
thread_table() {
    local kind=$1 label=$2 t v r pps rpps added single="" x target result
    for t in 1 2 4 8; do
        v=$(median "quota_$kind$t.wall_ns_per_pair") r=$(median "raw_$kind$t.wall_ns_per_pair")
        if [ -z "$v" ] || [ -z "$r" ]; then
            na "threads $t, $label" "" "${WHY[quota_$kind$t]:-${WHY[raw_$kind$t]:-}}"
            continue
        fi
        pps=$(median "quota_$kind$t.pairs_per_s") rpps=$(median "raw_$kind$t.pairs_per_s")
        v=$(per_core "$v" $t) r=$(per_core "$r" $t)
        added=$(calc "$v - $r")
        [ $t = 1 ] && single=$added
        target="" result=""
        if [ -n "$single" ] && [ $t != 1 ]; then
            x=$(calc "$added / ($single > 1 ? $single : 1)" 2)
            target="added ${x}× 1 thread's"
            if [ $t = 2 ]; then target="added ≤ 1.5× 1 thread's (${x}×)"; result=$(verdict "$x" 1.5); fi
        fi
        row "threads $t, $label: $(calc "$pps / 1e6" 2) M pairs/s (raw $(calc "$rpps / 1e6" 2) M)" \
            "$v" "ns/pair/thr" "$r" "$target" "$result"
    done
}
thread_table t "plain"
thread_table s "stream-ordered"

# Group members: P processes allocating at once on one GPU, in one group (CUQUOTA_GROUP)
# and not; ns per pair as each process sees it (the median process), the ungrouped run as
# "raw". With more processes than CPUs they take turns, alike in both.
for p in 2 4 8; do
    v=$(median "group_p$p.pair_ns") r=$(median "solo_p$p.pair_ns")
    if [ -z "$v" ] || [ -z "$r" ]; then
        na "$p processes, one group" "" "${WHY[group_p$p]:-${WHY[solo_p$p]:-}}"
        continue
    fi
    row "$p processes, one group: $(calc "1000 / $v" 2) M pairs/s each (ungrouped $(calc "1000 / $r" 2) M)" \
        "$v" "ns/pair" "$r" "raw = the same processes ungrouped" ""
done

# ---- printing ------------------------------------------------------------------------------

printf '\n%-52s %10s %-12s %9s %9s %7s  %s\n' case value unit raw "over raw" ratio "target → result"
printf '%s\n' "$(printf '%.0s-' {1..130})"
for i in "${!R_CASE[@]}"; do
    tr=${R_TARGET[$i]}
    [ -n "$tr" ] && [ -n "${R_RESULT[$i]}" ] && tr="$tr → ${R_RESULT[$i]}"
    [ -z "$tr" ] && tr=${R_RESULT[$i]}
    printf '%-52s %10s %-12s %9s %9s %7s  %s\n' "${R_CASE[$i]}" "${R_VALUE[$i]:-—}" "${R_UNIT[$i]}" \
        "${R_RAW[$i]:-}" "${R_OVER[$i]:-}" "${R_RATIO[$i]:+${R_RATIO[$i]}×}" "$tr"
done
secs() { calc "($2 - $1) / 1e9" 0; }
echo
echo "raw: the same case without the interposer, same run. Frees are timed one by one (two"
echo "clock reads included); \"added\" = value − raw. Threads: ns/pair/thr = wall time ×"
echo "min(threads, $(nproc) CPUs) / all pairs (8 threads oversubscribe). Report rows: one run each;"
echo "value = wall-clock rate. Load at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo "time: build $(secs "$t_script" "$t_built") s, micro $(secs "$t_built" "$t_micro") s, report $(secs "$t_micro" "$t_end") s"

if [ -n "$json" ]; then
    jstr() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
    jnum() { if [ -n "$1" ]; then printf '%s' "$1"; else printf null; fi; }
    {
        printf '{\n  "date": %s,\n  "commit": %s,\n  "cpus": %s,\n  "cpu": %s,\n  "reps": %s,\n  "rows": [\n' \
            "$(jstr "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$(jstr "$commit")" "$(nproc)" "$(jstr "$cpu")" "$reps"
        for i in "${!R_CASE[@]}"; do
            [ "$i" -gt 0 ] && printf ',\n'
            printf '    {"case": %s, "value": %s, "unit": %s, "raw": %s, "over_raw": %s, "ratio": %s, "target": %s, "result": %s}' \
                "$(jstr "${R_CASE[$i]}")" "$(jnum "${R_VALUE[$i]}")" "$(jstr "${R_UNIT[$i]}")" \
                "$(jnum "${R_RAW[$i]}")" "$(jnum "${R_OVER[$i]}")" "$(jnum "${R_RATIO[$i]}")" \
                "$(jstr "${R_TARGET[$i]}")" "$(jstr "${R_RESULT[$i]}")"
        done
        printf '\n  ]\n}\n'
    } >"$json"
    echo "JSON: $json"
fi
