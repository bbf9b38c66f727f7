"""A user metric is computed from the deployed artifact's own outputs: the figure nnsweep records
equals the user's function applied to that artifact run by hand with the plain runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _weighted_sum(outputs: list[np.ndarray], targets: np.ndarray) -> float:
    """Touches every bit of every output: any other outputs give another float."""
    out = outputs[0].astype(np.float64)
    weights = np.arange(1, out.shape[1] + 1, dtype=np.float64)
    return float(np.sum(out * weights) + np.sum(np.asarray(targets)))


def _by_hand(runtime: str, path: Path, inputs: np.ndarray) -> np.ndarray:
    rows = []
    if runtime == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        rows = [session.run(None, {name: x[None]})[0] for x in inputs]
    else:
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=str(path), num_threads=1)
        interp.allocate_tensors()
        given, taken = interp.get_input_details()[0]["index"], interp.get_output_details()[0]["index"]
        for x in inputs:
            interp.set_tensor(given, x[None])
            interp.invoke()
            rows.append(interp.get_tensor(taken).copy())
    return np.concatenate(rows).astype(np.float32)


@pytest.mark.parametrize(("runtime", "backends"), [("onnxruntime", ("cpu",)), ("litert", ("xnnpack", "cpu"))])
def test_the_recorded_metric_is_the_users_function_on_the_artifacts_own_outputs(
    tmp_path: Path, digits, runtime: str, backends: tuple[str, ...]
) -> None:  # type: ignore[no-untyped-def]
    import nnsweep.api as ns
    from nnsweep.bench import MeasureSettings

    result = ns.measure(
        digits.module,
        digits.example_input,
        dataset=digits.dataset,
        settings=MeasureSettings(warmup=0, iters=2),
        cache_dir=tmp_path,
        metrics={"weighted": _weighted_sum},
        runtime=runtime,
        backends=backends,
        quant={"mode": "static_int8"},
    )
    evaluation = digits.dataset.evaluation
    by_hand = _weighted_sum([_by_hand(runtime, result.artifact.path, evaluation.inputs)], evaluation.labels)
    assert result.metrics["weighted"] == by_hand  # bit-equal: the same outputs, the same function
    assert result.to_dict()["metrics"] == {"weighted": by_hand}
