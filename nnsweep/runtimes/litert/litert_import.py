"""litert-torch and the two parts nnsweep uses, without what its native library writes to stderr.

Two settings, both for the process (a converting process: ``nnsweep bench``, a sweep's
conversion worker):

* ``TF_CPP_MIN_LOG_LEVEL`` defaults to 2 (warnings and errors): the converter library
  reads it when it loads, and logs "Estimated count of arithmetic ops" on every
  conversion otherwise. A value the user set is kept.
* the library's two lines on loading (absl's "All log messages before
  absl::InitializeLog() ...", "oneDNN custom operations are on ...") go to the debug log:
  no setting turns them off (:func:`~nnsweep.runtimes.common.converter.native_stderr_to_debug_log`).
"""

from __future__ import annotations

import logging
import os

from nnsweep.runtimes.common.converter import native_stderr_to_debug_log

__all__ = ["LiteRTQuantConfig", "litert_torch", "pt2e_quantizer"]

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

with native_stderr_to_debug_log(logging.getLogger(__name__), "loading litert-torch"):
    import litert_torch
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig as LiteRTQuantConfig
