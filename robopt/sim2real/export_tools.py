"""What the exporters share: the parity tolerance, silencing the exporters, an ONNX Runtime session."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

TOLERANCE = 1e-5  # max |exported - torch| accepted, per action component


@contextlib.contextmanager
def quiet():
    """Silence the exporters' progress lines, warnings (torch.jit.trace's deprecation) and log messages."""
    level = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(level)


def onnx_session(path: Path, threads: int | None = None):
    """An ONNX Runtime CPU session; ``threads`` pins one intra-op pool size with sequential execution."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
