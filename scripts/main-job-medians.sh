#!/usr/bin/env bash
# The README's main job (`pagoda bench` with its defaults) run several times,
# with the medians of the figures the decode-first default is judged on:
# per policy, hit rate, TTFT p50/p99, TPOT p99 and throughput, and LPM over
# FCFS. Replays depend on timing, so one run says little; issue 37's targets
# are on the median of five.
#
# Usage: scripts/main-job-medians.sh [extra pagoda bench options...]
# Environment (defaults in brackets):
#   PAGODA  the pagoda binary [target/release/pagoda, built if missing]
#   RUNS    runs [5]
#   OUT     folder for the runs' JSON [a temporary folder]
set -euo pipefail

cd "$(dirname "$0")/.."
PAGODA=${PAGODA:-target/release/pagoda}
RUNS=${RUNS:-5}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if [[ ! -x $PAGODA ]]; then
    cargo build --release -p pagoda-cli >&2
fi

for run in $(seq 1 "$RUNS"); do
    echo "run $run/$RUNS" >&2
    "$PAGODA" bench --quiet --json "$OUT/run.$run.json" "$@" >/dev/null
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
reports = [json.load(open(f"{out}/run.{r}.json")) for r in range(1, runs + 1)]
med = statistics.median
names = [p["policy"] for p in reports[0]["policies"]]
budgets = [("%s tok" % p["prefill_cap_tokens"]) if p.get("prefill_cap_tokens") else "off" for p in reports[0]["policies"]]
figures = [
    ("hit rate %", lambda p: p["cache_hit_rate_pct"], "{:.1f}"),
    ("TTFT p50 ms", lambda p: p["ttft_ms"]["p50"], "{:.0f}"),
    ("TTFT p99 ms", lambda p: p["ttft_ms"]["p99"], "{:.0f}"),
    ("TPOT p99 ms", lambda p: p["tpot_ms"]["p99"], "{:.1f}"),
    ("req/s", lambda p: p["requests_per_s"], "{:.1f}"),
    ("preemptions", lambda p: p["preemptions"], "{:.0f}"),
]
print(f"Medians of {runs} runs ({reports[0]['title']})\n")
print("| policy | budget | " + " | ".join(f[0] for f in figures) + " |")
print("|---|---|" + "---:|" * len(figures))
for i, name in enumerate(names):
    cells = [fmt.format(med([f(r["policies"][i]) for r in reports])) for _, f, fmt in figures]
    print(f"| {name} | {budgets[i]} | " + " | ".join(cells) + " |")
if "fcfs" in names and len(names) > 1:
    base = names.index("fcfs")
    print()
    for i, name in enumerate(names):
        if i == base:
            continue
        ratio = lambda f: med([f(r["policies"][i]) / max(f(r["policies"][base]), 1e-9) for r in reports])
        gain = med([r["policies"][i]["cache_hit_rate_pct"] - r["policies"][base]["cache_hit_rate_pct"] for r in reports])
        print(f"{name} / fcfs (median of per-run ratios): TPOT p99 {ratio(lambda p: p['tpot_ms']['p99']):.2f}x, "
              f"TTFT p99 {ratio(lambda p: p['ttft_ms']['p99']):.2f}x, throughput {ratio(lambda p: p['requests_per_s']):.2f}x, "
              f"hit rate {gain:+.1f} points")
PY
