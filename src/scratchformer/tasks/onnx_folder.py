"""What every ONNX export (classify, lm) checks first: the exporter's packages are there, and
`--out` is a new or empty folder, not a link (export_folder.check_out)."""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .export_folder import check_out


def new_export_folder(out_dir: str | Path) -> Path:
    """`out_dir` as a Path, once onnx + onnxscript import and the folder is new or empty."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise UserError("ONNX export needs onnx and onnxscript: pip install 'scratchformer[export]'") from None
    return check_out(out_dir)
