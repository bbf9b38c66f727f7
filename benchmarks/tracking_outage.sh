#!/usr/bin/env bash
# A tracking outage in the middle of a sweep: an MLflow server (sqlite backend, on loopback)
# is stopped 12 s after `nnsweep run` starts and restarted 25 s later, with MLflow's own
# client retries off (an outage longer than their backoff). Prints the sweep's exit code,
# its trial count, and the trial runs the server holds afterwards by status: every told
# trial should be FINISHED there, without a second run of the sweep.
#
# Usage: bash benchmarks/tracking_outage.sh [WORKDIR] [RETRIES]   (about 2 minutes; port 5731)
#   RETRIES: MLflow's client retries (MLFLOW_HTTP_REQUEST_MAX_RETRIES): 0 (the default
#   here: off) or "mlflow" (MLflow's own default, 7 with exponential backoff).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/.venv/bin"
work=${1:-$(mktemp -d)}
retries=${2:-0}
port=5731
mkdir -p "$work" && cd "$work"
cat > spec.yaml <<SPEC
name: outage
model: digits
devices: [host]
space:
  runtime: [onnxruntime, torch, executorch]
  quant: [fp32, dynamic_int8, static_int8]
  granularity: [per_tensor, per_channel]
budget: {trials: 16}
measure: {warmup: 2, iters: 200, remeasure: 0}
tracking: {uri: "http://127.0.0.1:$port", experiment: outage}
SPEC
server() {
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false "$bin/mlflow" server --backend-store-uri "sqlite:///$work/server.db" \
    --default-artifact-root "$work/art" --host 127.0.0.1 --port $port --workers 1 > server.log 2>&1 &
  echo $! > server.pid
  for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && return; sleep 1; done
  echo "the MLflow server did not start (server.log)"; exit 1
}
stop_server() { pkill -f -- "--port $port" || true; sleep 1; }
trap stop_server EXIT
server
if [ "$retries" = mlflow ]; then unset MLFLOW_HTTP_REQUEST_MAX_RETRIES; else export MLFLOW_HTTP_REQUEST_MAX_RETRIES=$retries; fi
echo "MLflow client retries: ${MLFLOW_HTTP_REQUEST_MAX_RETRIES:-the MLflow default}"
"$bin/python" -m nnsweep --cache-dir "$work/cache" run spec.yaml --executor local \
  > run.out 2> run.err &
sweep=$!
sleep 12
echo "server stopped at $(date +%T)"; stop_server
sleep 25
server; echo "server back at $(date +%T)"
code=0; wait $sweep || code=$?
echo "nnsweep run exited $code; $(grep 'Trials:' run.out)"
"$bin/python" - "$port" <<'PY'
import collections, sys
from mlflow import MlflowClient
client = MlflowClient(f"http://127.0.0.1:{sys.argv[1]}")
experiment = client.get_experiment_by_name("outage")
runs = client.search_runs([experiment.experiment_id], "tags.`nnsweep.kind` = 'trial'", max_results=1000)
print("trial runs on the server by status:", dict(collections.Counter(r.info.status for r in runs)))
PY
