#!/usr/bin/env bash
# Install an nnsweep device agent on a Linux board (aarch64, 64-bit OS; Ray has no
# 32-bit wheels). The agent extra installs the runtimes only: Ray, PyTorch, ExecuTorch,
# ONNX Runtime, LiteRT. Conversion, Optuna and MLflow stay on the host. For the armnn
# runtime, Arm NN comes from Debian (it runs in the system python3):
#   sudo apt-get install python3-pyarmnn libarmnn-cpuacc-backend22 libarmnn-cpuref-backend22 libarmnntfliteparser22
#
#   ./install.sh [--lite] [SOURCE]   SOURCE: a path or URL pip understands (default: this checkout)
#
# --lite installs the agent-lite extra: Ray, ONNX Runtime and LiteRT, without PyTorch, for
# a board that cannot hold it (a measuring process that imports torch needs ~0.9 GB, and
# on aarch64 PyPI's torch wheel pulls ~5 GB of CUDA libraries). ExecuTorch then runs
# torch-free: device_agents/etlite/build.sh links a small runner against the executorch
# wheel's own shared libraries (the version pyproject.toml pins; needs g++). Without a
# C++ compiler the board offers onnxruntime, litert and armnn only.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
extra=agent
if [ "${1:-}" = "--lite" ]; then
    extra=agent-lite
    shift
fi
source="${1:-$here}"
prefix="${NNSWEEP_AGENT_HOME:-$HOME/nnsweep-agent}"

python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "nnsweep needs Python 3.11")'
case "$(uname -m)" in
  aarch64|x86_64) ;;
  *) echo "unsupported architecture $(uname -m): Ray needs a 64-bit OS" >&2; exit 2 ;;
esac
python3 -m venv "$prefix/venv"
"$prefix/venv/bin/python" -m pip install --disable-pip-version-check "${source}[${extra}]"
if [ "$extra" = agent-lite ]; then
    if command -v "${CXX:-g++}" >/dev/null; then
        "$here/device_agents/etlite/build.sh" "$prefix/venv/bin/python"
    else
        echo "no C++ compiler (apt-get install g++): the lite agent offers no ExecuTorch" >&2
    fi
fi
echo "installed ($extra): $prefix/venv/bin/nnsweep"
echo "join a head: $prefix/venv/bin/nnsweep agent join --address HEAD:6379 --device \$(hostname) --token-file ~/.ray/auth_token"
