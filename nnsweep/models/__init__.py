"""Models and data: the built-in ``digits`` family, torchvision classifiers by name,
and user models given as ``package.module:function`` or ``path/to/file.py:function``."""

from nnsweep.models._bundle import (
    Dataset,
    ModelBundle,
    Split,
    class_positions,
    flatten_outputs,
    labelled_layout,
    output_columns,
    per_sample_shapes,
    takes_batches,
    unlabelled_layout,
)
from nnsweep.models._load import BUILTIN, DECODERS, check_reference, load_model, register_live
from nnsweep.models._shape import MAX_INPUT_ELEMENTS, check_input_shape
from nnsweep.models._snapshot import ModelSnapshot, SnapshotStore, reference_outputs
from nnsweep.models._user_code import check_function_reference, import_function, register_live_function

__all__ = [
    "BUILTIN",
    "DECODERS",
    "MAX_INPUT_ELEMENTS",
    "Dataset",
    "ModelBundle",
    "ModelSnapshot",
    "SnapshotStore",
    "Split",
    "check_function_reference",
    "check_input_shape",
    "check_reference",
    "class_positions",
    "flatten_outputs",
    "import_function",
    "labelled_layout",
    "load_model",
    "output_columns",
    "per_sample_shapes",
    "reference_outputs",
    "register_live",
    "register_live_function",
    "takes_batches",
    "unlabelled_layout",
]
