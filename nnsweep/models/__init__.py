"""Models and data: the built-in ``digits`` family, torchvision classifiers by name,
and user models given as ``package.module:function`` or ``path/to/file.py:function``."""

from nnsweep.models._bundle import Dataset, ModelBundle, Split
from nnsweep.models._load import BUILTIN, check_reference, load_model, register_live

__all__ = ["BUILTIN", "Dataset", "ModelBundle", "Split", "check_reference", "load_model", "register_live"]
