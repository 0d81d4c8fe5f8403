#!/usr/bin/env bash
# Pagoda against llama.cpp on the same files, on this machine's CPU: a
# benchmark anyone can rerun, not part of the test command.
#
# 1. Builds llama.cpp's `llama-bench` and `llama-batched-bench` for this CPU
#    (GGML_NATIVE: AVX2, AVX-512, VNNI... as the CPU has them) from the
#    source the PyPI sdist of `llama-cpp-python` ships (`vendor/llama.cpp`),
#    with cmake and ninja from PyPI, once, into ~/.cache/pagoda/llama.cpp.
# 2. Writes the files with `pagoda synth` (both engines read the same bytes).
# 3. Runs both engines on each file, alternating, ROUNDS times: llama-bench
#    (decode of 128 tokens, prefill of 512, flash attention on) and
#    llama-batched-bench -pps (16 sequences decoding 64 tokens after a
#    shared 128-token prompt; without -pps for a hybrid such as LFM2,
#    whose shared prompt llama.cpp refuses) against `pagoda bench --suite speed`'s
#    matching figures (decode at batch 1, prefill of 512, 16 sequences after
#    a shared 128-token prompt).
# 4. Then, per file, PAIRS decode-only pairs back to back (llama-bench's
#    128 tokens at batch 1 and `pagoda run`'s, which goes first alternating):
#    this machine kind's read bandwidth drifts by a quarter from one minute
#    to the next, so a pair's ratio, both halves seconds apart, reads the
#    engines where the rounds' decode ratio (minutes apart) reads the drift.
# 5. Prints the medians and the ratios (three decimals: a target such as
#    1.25x is then read without rounding), with the CPU's model and
#    extensions, and the pairs' median decode figures and median of
#    per-pair ratios.
#
# Usage: bash scripts/compare-llama-cpp.sh [SHAPE[@LAYERS]:TYPE ...]
#   (@LAYERS: the shape's first LAYERS layers, `pagoda synth --layers`, e.g.
#   qwen3-30b-a3b@12:q4_k_m, a quarter of the mixture of experts)
#   default files: llama3.2-1b:q4_k_m llama3.2-1b:q4_0 llama3.2-1b:q8_0
#                  llama3-8b:q4_k_m llama3-8b:q4_0
#   THREADS (2), ROUNDS (3), PAIRS (5), DEPTH (4096: the speed suite's deepest decode,
#   which no ratio reads; 512 saves minutes at 8B on 2 cores), PYTHON
#   (python3), LLAMA_CPP_PYTHON (0.3.36),
#   PAGODA_CACHE (~/.cache/pagoda), MODEL_DIR ($PAGODA_CACHE/synth) and
#   KEEP (a directory to keep every run's JSON in; by default they are
#   written to a temporary one and deleted), and REPACK (1; 0 runs
#   llama.cpp without its repacked and AMX weight layouts: its AMX
#   products crash on some shapes, Granite 4.0-H's mixers among them).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=${THREADS:-2}
rounds=${ROUNDS:-3}
pairs=${PAIRS:-5}
depth=${DEPTH:-4096}
python=${PYTHON:-python3}
version=${LLAMA_CPP_PYTHON:-0.3.36}
cache=${PAGODA_CACHE:-$HOME/.cache/pagoda}
models=${MODEL_DIR:-$cache/synth}
llama=$cache/llama.cpp/$version
files=("$@")
# llama-bench takes `--repack 0`, llama-batched-bench `--no-repack`.
bench_repack=() batched_repack=()
if [[ ${REPACK:-1} == 0 ]]; then
  bench_repack=(--repack 0) batched_repack=(--no-repack)
fi
((${#files[@]})) || files=(llama3.2-1b:q4_k_m llama3.2-1b:q4_0 llama3.2-1b:q8_0 llama3-8b:q4_k_m llama3-8b:q4_0)

say() { printf '== %s\n' "$*" >&2; }

if [[ ! -x $llama/build/bin/llama-bench || ! -x $llama/build/bin/llama-batched-bench ]]; then
  say "building llama.cpp $version (llama-cpp-python's sdist) for this CPU"
  mkdir -p "$llama"
  [[ -x $llama/venv/bin/python ]] || "$python" -m venv "$llama/venv"
  "$llama/venv/bin/pip" install -q cmake ninja
  if [[ ! -d $llama/src ]]; then
    # The sdist's address from PyPI's JSON index (PEP 691), fetched as is:
    # `pip download --no-binary` would first build the package's metadata,
    # which for llama-cpp-python compiles llama.cpp once more (minutes).
    mkdir -p "$llama/sdist"
    url=$("$python" - "$version" <<'PY'
import json, sys, urllib.request
version = sys.argv[1]
request = urllib.request.Request(
    "https://pypi.org/simple/llama-cpp-python/",
    headers={"Accept": "application/vnd.pypi.simple.v1+json"},
)
files = json.load(urllib.request.urlopen(request, timeout=60))["files"]
print(next(f["url"] for f in files if f["filename"] == f"llama_cpp_python-{version}.tar.gz"))
PY
)
    curl -fsSL -o "$llama/sdist/llama_cpp_python-$version.tar.gz" "$url"
    mkdir -p "$llama/src"
    tar -xzf "$llama"/sdist/llama_cpp_python-*.tar.gz -C "$llama/src" --strip-components=1
  fi
  PATH=$llama/venv/bin:$PATH cmake -S "$llama/src/vendor/llama.cpp" -B "$llama/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON >"$llama/configure.log"
  PATH=$llama/venv/bin:$PATH cmake --build "$llama/build" --target llama-bench llama-batched-bench \
    -j "$(nproc)" >"$llama/build.log"
fi

say "building pagoda (release)"
cargo build --release -q -p pagoda-cli
pagoda=target/release/pagoda

mkdir -p "$models"
if [[ -n ${KEEP:-} ]]; then
  out=$KEEP
  mkdir -p "$out"
else
  out=$(mktemp -d)
fi
for f in "${files[@]}"; do
  shape=${f%%:*} type=${f##*:}
  file=$models/$shape-$type.gguf
  layers=()
  [[ $shape == *@* ]] && layers=(--layers "${shape#*@}")
  [[ -s $file ]] || "$pagoda" synth --shape "${shape%@*}" ${layers[@]+"${layers[@]}"} --type "$type" --out "$file"
done

for round in $(seq "$rounds"); do
  for f in "${files[@]}"; do
    shape=${f%%:*} type=${f##*:}
    file=$models/$shape-$type.gguf
    tag=$shape-$type-$round
    say "round $round/$rounds: $shape $type: llama.cpp"
    "$llama/build/bin/llama-bench" -m "$file" -t "$threads" -fa on -p 512 -n 128 -r 1 -o json \
      ${bench_repack[@]+"${bench_repack[@]}"} \
      >"$out/llama-$tag.json" 2>/dev/null
    "$llama/build/bin/llama-batched-bench" -m "$file" -t "$threads" -fa on -c 4096 -b 2048 -ub 512 \
      -npp 128 -ntg 64 -npl 16 -pps --output-format jsonl \
      ${batched_repack[@]+"${batched_repack[@]}"} 2>/dev/null |
      grep '^{' >"$out/batched-$tag.jsonl" || true
    # A hybrid's recurrent state cannot be shared (llama.cpp refuses the
    # shared prompt's copy): each sequence then computes its own prompt,
    # as Pagoda computes a hybrid's.
    if [[ ! -s $out/batched-$tag.jsonl ]]; then
      "$llama/build/bin/llama-batched-bench" -m "$file" -t "$threads" -fa on -c 4096 -b 2048 -ub 512 \
        -npp 128 -ntg 64 -npl 16 --output-format jsonl \
        ${batched_repack[@]+"${batched_repack[@]}"} 2>/dev/null |
        grep '^{' >"$out/batched-$tag.jsonl" || true
    fi
    say "round $round/$rounds: $shape $type: pagoda"
    "$pagoda" bench --model "$file" --suite speed --threads "$threads" --speed-depth "$depth" --quiet \
      --json "$out/pagoda-$tag.json" >/dev/null
  done
done

# One engine's 128 decode tokens at batch 1 on FILE, into JSON file OUT.
llama_decode() {
  "$llama/build/bin/llama-bench" -m "$1" -t "$threads" -fa on -p 0 -n 128 -r 1 -o json \
    ${bench_repack[@]+"${bench_repack[@]}"} >"$2" 2>/dev/null
}
pagoda_decode() {
  "$pagoda" run --model "$1" --prompt "Once upon a time" --max-tokens 128 \
    --threads "$threads" --json 2>/dev/null | tail -n 1 >"$2"
}
for f in "${files[@]}"; do
  shape=${f%%:*} type=${f##*:}
  file=$models/$shape-$type.gguf
  for pair in $(seq "$pairs"); do
    say "decode pair $pair/$pairs: $shape $type"
    tag=$shape-$type-$pair
    if ((pair % 2)); then
      pagoda_decode "$file" "$out/pair-pagoda-$tag.json"
      llama_decode "$file" "$out/pair-llama-$tag.json"
    else
      llama_decode "$file" "$out/pair-llama-$tag.json"
      pagoda_decode "$file" "$out/pair-pagoda-$tag.json"
    fi
  done
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -xE 'avx2|fma|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|avx_vnni|amx_int8' | tr '\n' ' ')
"$python" - "$out" "$rounds" "$pairs" "$cpu" "$flags" "${files[@]}" <<'EOF'
import json, statistics, sys
out, rounds, pairs, cpu, flags = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
files = sys.argv[6:]

def load(path):
    with open(path) as f:
        return json.load(f)

print(f"CPU: {cpu}; extensions: {flags.strip() or 'none of note'}")
print(f"medians of {rounds} alternating rounds; ratio = pagoda / llama.cpp")
head = ("file", "decode b1 tok/s", "ratio", "of read BW", "prefill 512 tok/s", "ratio", "16 after shared tok/s", "ratio")
rows = [head]
for f in files:
    shape, kind = f.split(":")
    dec, pp, b16, p_dec, p_pp, p_b16, share = [], [], [], [], [], [], []
    for r in range(1, rounds + 1):
        tag = f"{shape}-{kind}-{r}"
        for t in load(f"{out}/llama-{tag}.json"):
            (dec if t["n_gen"] > 0 else pp).append(t["avg_ts"])
        with open(f"{out}/batched-{tag}.jsonl") as fh:
            b16 += [json.loads(line)["speed_tg"] for line in fh if line.strip()]
        p = load(f"{out}/pagoda-{tag}.json")
        p_dec.append(p["decode"][0]["tokens_per_s"])
        share.append(p["decode"][0]["share_of_bandwidth"])
        p_pp.append(p["prefill_512_tokens_per_s"])
        p_b16.append(p["batch_16_tokens_per_s"])
    m = lambda xs: statistics.median(xs) if xs else float("nan")
    ratio = lambda a, b: f"{m(a) / m(b):.3f}x" if b and m(b) else "-"
    rows.append((f"{shape} {kind}",
                 f"{m(p_dec):.1f} vs {m(dec):.1f}", ratio(p_dec, dec), f"{100 * m(share):.0f}%",
                 f"{m(p_pp):.1f} vs {m(pp):.1f}", ratio(p_pp, pp),
                 f"{m(p_b16):.1f} vs {m(b16):.1f}", ratio(p_b16, b16)))
widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
for r in rows:
    print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
if pairs:
    print(f"\ndecode at batch 1, {pairs} back-to-back pairs (128 tokens each): medians, "
          "and the median of the pairs' ratios")
    for f in files:
        shape, kind = f.split(":")
        ours, theirs = [], []
        for p in range(1, pairs + 1):
            tag = f"{shape}-{kind}-{p}"
            mine = load(f"{out}/pair-pagoda-{tag}.json")["timings"]["decode_tokens_per_s"]
            peer = [t["avg_ts"] for t in load(f"{out}/pair-llama-{tag}.json") if t["n_gen"] > 0]
            ours.append(mine)
            theirs.append(peer[0])
        ratios = [a / b for a, b in zip(ours, theirs)]
        print(f"{shape} {kind}: {statistics.median(ours):.1f} vs {statistics.median(theirs):.1f} tok/s, "
              f"{statistics.median(ratios):.3f}x (pairs {min(ratios):.2f}-{max(ratios):.2f}x)")
EOF
[[ -n ${KEEP:-} ]] || rm -rf "$out"
