"""Atomic file writes: a killed process never leaves a half-written result.

Every writer here writes into a temporary file in the *same directory* as the destination (so the
final :func:`os.replace` is a rename within one file system, which POSIX makes atomic), flushes and
``fsync``\\ s it, and only then renames it over the destination. A reader therefore sees either the
old complete file or the new complete file, never a prefix. If anything fails before the rename the
temporary file is removed and the exception propagates.

Loading checkpoints goes through :func:`torch_load`, which always uses ``weights_only=True`` so a
results directory can never execute code when it is read.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "atomic_write_json",
           "atomic_torch_save", "torch_load"]


def _fsync_dir(directory: Path) -> None:
    # makes the rename itself durable; not available on every platform/file system
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _default_mode() -> int:
    # mkstemp creates 0600 files; give results the permissions an ordinary open() would
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(f)`` on a temporary binary file, then atomically move it to ``path``.

    Parameters
    ----------
    path : path-like
        Destination. Its parent directory is created if needed.
    write : callable
        Receives an open binary file object and writes the whole content into it.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode())
        os.replace(tmp, path)
    except BaseException:
        # BaseException: a KeyboardInterrupt mid-write must not leave the temporary file behind
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"data must be bytes, got {type(data).__name__}")
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 1) -> Path:
    """Serialise ``obj`` as JSON (strict: NaN/inf are rejected) and write it atomically.

    The object is serialised completely *before* the file is opened, so an object that cannot be
    serialised leaves the destination untouched.
    """
    text = json.dumps(obj, indent=indent, allow_nan=False, sort_keys=False)
    return atomic_write_text(path, text + "\n")


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)`` atomically (same argument order as :func:`torch.save`)."""
    return atomic_write(path, lambda f: torch.save(obj, f))


def torch_load(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """``torch.load`` with ``weights_only=True`` (tensors, containers and plain Python values only)."""
    return torch.load(Path(path), map_location=map_location, weights_only=True)
