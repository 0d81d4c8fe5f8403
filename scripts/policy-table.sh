#!/usr/bin/env bash
# The policy table of issue 22: every bench workload, with a roomy pool and
# under cache pressure, under each policy; three runs of each, medians
# printed as a markdown table (hit rate, its offline bound, TTFT p50/p99,
# TPOT p99, throughput).
#
# Each `pagoda bench` run plays one trace under every policy in turn, so the
# policies of a row pair are compared within one process; replays depend on
# timing, hence the medians. The default size (REQUESTS=48) keeps the whole
# table (4 workloads x 2 pools x 3 runs = 24 bench runs, each running every
# policy) within about 15 minutes on two cores (48 requests took 23 to 40 s a
# run here, with both policies, on a busy machine); raise it on a bigger
# machine for steadier figures.
#
# Usage: scripts/policy-table.sh [extra pagoda bench options...]
# Environment (defaults in brackets):
#   PAGODA          the pagoda binary [target/release/pagoda, built if missing]
#   REQUESTS        requests per run [48]
#   RUNS            runs per cell [3]
#   WORKLOADS       [few-shot rag agent hot-prefix]
#   ROOMY_PAGES     pool that holds the working set [16384]
#   PRESSURE_PAGES  pool under pressure [1024]
#   POLICIES        policies, space-separated (fcfs, lpm[:KEY=VALUE,...]) [fcfs lpm]
#   OUT             folder for the runs' JSON [a temporary folder]
set -euo pipefail

cd "$(dirname "$0")/.."
PAGODA=${PAGODA:-target/release/pagoda}
REQUESTS=${REQUESTS:-48}
RUNS=${RUNS:-3}
WORKLOADS=${WORKLOADS:-few-shot rag agent hot-prefix}
ROOMY_PAGES=${ROOMY_PAGES:-16384}
PRESSURE_PAGES=${PRESSURE_PAGES:-1024}
POLICIES=${POLICIES:-fcfs lpm}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if [[ ! -x $PAGODA ]]; then
    cargo build --release -p pagoda-cli >&2
fi
policy_args=()
for p in $POLICIES; do
    policy_args+=(--policy "$p")
done

start=$SECONDS
for workload in $WORKLOADS; do
    for pool in roomy pressure; do
        pages=$ROOMY_PAGES
        [[ $pool == pressure ]] && pages=$PRESSURE_PAGES
        for run in $(seq 1 "$RUNS"); do
            echo "[$((SECONDS - start)) s] $workload, $pool ($pages pages), run $run/$RUNS" >&2
            "$PAGODA" bench --workload "$workload" --kv-pages "$pages" \
                --requests "$REQUESTS" "${policy_args[@]}" --quiet \
                --json "$OUT/$workload.$pool.$run.json" "$@" >/dev/null
        done
    done
done
echo "[$((SECONDS - start)) s] done; runs in $OUT" >&2

python3 - "$OUT" "$POLICIES" "$REQUESTS" "$RUNS" "$ROOMY_PAGES" "$PRESSURE_PAGES" "$WORKLOADS" <<'PY'
import json, statistics, sys
out, policies, requests, runs, roomy, pressure, workloads = sys.argv[1:]
policies = policies.split()
pools = [("roomy", roomy), ("pressure", pressure)]
print(f"Medians of {runs} runs of {requests} requests each.\n")
print("| workload | pool (pages) | policy | hit rate % | bound % | TTFT p50 ms | TTFT p99 ms | TPOT p99 ms | req/s |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for w in workloads.split():
    for pool, pages in pools:
        reports = []
        for r in range(1, int(runs) + 1):
            with open(f"{out}/{w}.{pool}.{r}.json") as f:
                reports.append(json.load(f))
        med = lambda xs: statistics.median(xs)
        for i, name in enumerate(policies):
            ps = [rep["policies"][i] for rep in reports]
            m = lambda f: med([f(p) for p in ps])
            # Each run's bound over the prompts it admitted (older binaries
            # wrote one arrival-order optimum per trace).
            bound = m(lambda p: p.get("hit_rate_bound_pct", reports[0].get("optimal_hit_rate_pct", 0)))
            print(f"| {w} | {pool} ({pages}) | {name} "
                  f"| {m(lambda p: p['cache_hit_rate_pct']):.1f} | {bound:.1f} "
                  f"| {m(lambda p: p['ttft_ms']['p50']):.0f} | {m(lambda p: p['ttft_ms']['p99']):.0f} "
                  f"| {m(lambda p: p['tpot_ms']['p99']):.0f} | {m(lambda p: p['requests_per_s']):.2f} |")
PY
