#!/usr/bin/env bash
# Builds nnsweep's torch-free ExecuTorch runner (etlite.cpp) into a Python environment:
# PYTHON's sys.prefix/lib/nnsweep-etlite/ gets libnnsweep_etlite.so and the ExecuTorch
# shared libraries it links (from the executorch wheel of the version pyproject.toml pins:
# the same runtime the host's ExecuTorch converts for, so there is no version skew).
# Those libraries need no PyTorch; only the wheel's Python bindings do.
#
#   build.sh PYTHON [DEST]   PYTHON: the agent's venv python (its pip downloads the wheel
#                            when the environment has no executorch package); DEST: where
#                            to build instead (the runner then needs NNSWEEP_ETLITE_DIR=DEST)
#
# Needs a C++17 compiler ($CXX, default g++; Debian: apt-get install g++) and Python. Nothing is downloaded at run time: the wheel comes from the package index here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${1:?usage: build.sh PYTHON}"
cxx="${CXX:-g++}"
command -v "$cxx" >/dev/null || { echo "etlite: no C++ compiler ($cxx); apt-get install g++" >&2; exit 2; }

version=$("$python" - "$repo/pyproject.toml" <<'EOF'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]
pins = [m.group(1) for dep in extras["agent"] if (m := re.fullmatch(r"executorch==(\S+)", dep))]
print(pins[0])
EOF
)
dest="${2:-$("$python" -c 'import sys; print(sys.prefix)')/lib/nnsweep-etlite}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The executorch package of this environment when it has the pinned one (the host), else
# the wheel alone (--no-deps: no torch), unpacked in a scratch folder.
et=$("$python" - "$version" <<'EOF'
import importlib.util, sys
from importlib import metadata
spec = importlib.util.find_spec("executorch")
try:
    same = metadata.version("executorch") == sys.argv[1]
except metadata.PackageNotFoundError:
    same = False
print(spec.submodule_search_locations[0] if spec and same else "")
EOF
)
if [ -z "$et" ]; then
    echo "etlite: downloading the executorch $version wheel (no dependencies)" >&2
    "$python" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$work/wheel" "executorch==$version" >&2
    "$python" -m zipfile -e "$work"/wheel/executorch-*.whl "$work/unpacked"
    et="$work/unpacked/executorch"
fi
libs="executorch executorch_threadpool executorch_backend_xnnpack executorch_kernels_optimized executorch_kernels_quantized"
mkdir -p "$dest"
for l in $libs; do cp "$et/lib/lib$l.so" "$dest/"; done
link=""
for l in $libs; do link="$link -l$l"; done
# --no-as-needed: the backends and kernels register themselves from static initializers,
# so they must be loaded although no symbol of theirs is called.
# shellcheck disable=SC2086
"$cxx" -std=c++17 -O2 -fPIC -DC10_USING_CUSTOM_GENERATED_MACROS -Wno-deprecated-declarations -shared -o "$dest/libnnsweep_etlite.so.tmp" "$here/etlite.cpp" \
    -I"$et/include" -I"$et/include/executorch/runtime/core/portable_type/c10" -L"$dest" -Wl,--no-as-needed $link -Wl,--as-needed -Wl,-rpath,'$ORIGIN'
mv "$dest/libnnsweep_etlite.so.tmp" "$dest/libnnsweep_etlite.so"
echo "$version" >"$dest/executorch-version"
echo "etlite: built $dest/libnnsweep_etlite.so (ExecuTorch $version, no PyTorch)" >&2
