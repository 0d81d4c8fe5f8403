#!/usr/bin/env bash
# `pagoda serve` under FCFS and under LPM, alternating, on the same bounded
# load: CLIENTS streaming clients (no hang-ups), every prompt starting with
# the same SHARED-token system prompt, greedy, fixed output lengths. Prints
# each run's figures and the medians of TTFT p50 and TPOT p99 per policy,
# with LPM over FCFS. Loopback only; every run ends by itself.
#
# Usage: scripts/serve-policy-ab.sh MODEL.gguf [extra pagoda serve options...]
# Environment (defaults in brackets):
#   PAGODA    the pagoda binary [target/release/pagoda, built if missing]
#   PYTHON    a Python with httpx2 (tests/reference/requirements.txt) [.venv-ref/bin/python]
#   RUNS      runs per policy [5]
#   CLIENTS   concurrent streaming clients [32]
#   REQUESTS  requests per client [4]
#   SHARED    tokens of the shared system prompt [256]
#   PORT      first port [18600]
set -euo pipefail

cd "$(dirname "$0")/.."
model=${1:?usage: scripts/serve-policy-ab.sh MODEL.gguf [serve options...]}
shift
PAGODA=${PAGODA:-target/release/pagoda}
PYTHON=${PYTHON:-.venv-ref/bin/python}
RUNS=${RUNS:-5}
CLIENTS=${CLIENTS:-32}
REQUESTS=${REQUESTS:-4}
SHARED=${SHARED:-256}
PORT=${PORT:-18600}
out=$(mktemp -d)
if [[ ! -x $PAGODA ]]; then
    cargo build --release -p pagoda-cli >&2
fi

server=""
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null || true; }
trap cleanup EXIT

for run in $(seq 1 "$RUNS"); do
    for policy in fcfs lpm; do
        [[ $policy == lpm ]] && port=$((PORT + run * 2 + 1)) || port=$((PORT + run * 2))
        "$PAGODA" serve --model "$model" --policy "$policy" --host 127.0.0.1 --port "$port" "$@" \
            >"$out/serve.$policy.$run.log" 2>&1 &
        server=$!
        for _ in $(seq 1 600); do
            curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
            sleep 0.1
        done
        "$PYTHON" tests/reference/load_test.py --base-url "http://127.0.0.1:$port" \
            --clients "$CLIENTS" --requests "$REQUESTS" --shared-prefix "$SHARED" \
            --prompt-len 16:96 --max-tokens 32:32 --ignore-eos \
            --stream-fraction 1 --disconnect-fraction 0 --seed "$run" --timeout 600 \
            >"$out/$policy.$run.json"
        kill "$server" && wait "$server" 2>/dev/null || true
        server=""
        echo "run $run $policy: $(cat "$out/$policy.$run.json")" >&2
    done
done

python3 - "$out" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
med = statistics.median
load = lambda p, r: json.load(open(f"{out}/{p}.{r}.json"))
rows = {p: [load(p, r) for r in range(1, runs + 1)] for p in ("fcfs", "lpm")}
print(f"Medians of {runs} alternating runs\n")
print("| policy | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | output tok/s |")
print("|---|---:|---:|---:|---:|---:|")
for p, rs in rows.items():
    m = lambda f: med([f(r) for r in rs])
    print(f"| {p} | {m(lambda r: r['ttft_ms']['p50']):.0f} | {m(lambda r: r['ttft_ms']['p99']):.0f} "
          f"| {m(lambda r: r['tpot_ms']['p50']):.1f} | {m(lambda r: r['tpot_ms']['p99']):.1f} "
          f"| {m(lambda r: r['output_tokens_per_s']):.0f} |")
ratio = lambda f: med([f(l) / f(c) for l, c in zip(rows["lpm"], rows["fcfs"])])
print(f"\nlpm / fcfs (median of per-run ratios): TPOT p99 {ratio(lambda r: r['tpot_ms']['p99']):.2f}x, "
      f"TTFT p50 {ratio(lambda r: r['ttft_ms']['p50']):.2f}x")
PY
