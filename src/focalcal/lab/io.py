"""Atomic file writes: a killed process never leaves a half-written result.

Every writer here writes into a temporary file in the *same directory* as the destination (so the
final :func:`os.replace` is a rename within one file system, which POSIX makes atomic), flushes and
``fsync``\\ s it, and only then renames it over the destination. A reader therefore sees either the
old complete file or the new complete file, never a prefix. If anything fails before the rename the
temporary file is removed and the exception propagates.

Loading checkpoints goes through :func:`torch_load`, which always uses ``weights_only=True`` so a
results directory can never execute code when it is read. :func:`source_digest` is the one digest
of source files that the project's caches are keyed by.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import torch

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "atomic_write_json",
           "atomic_torch_save", "torch_load", "source_digest"]


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


# CPython 3.11's parser keeps its recursion depth in interpreter state: ast.parse from several
# threads at once can fail with "AST constructor recursion depth mismatch" (the tests digest the
# chapters from a thread pool)
_PARSE_LOCK = threading.Lock()


def _code_text(path: Path) -> bytes:
    """What a module computes: its syntax tree without docstrings (comments, layout and line numbers
    are not in the tree), so that editing documentation does not invalidate the cache."""
    with _PARSE_LOCK:
        tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def source_digest(files: Iterable[Path], base: Path, extra: Iterable[str] = ()) -> str:
    """The one code digest of the project's caches (the lab's calibrator and released-network rows,
    the tests' smoke sweeps and executed chapters): ``files`` by their path relative to ``base``
    and their content, a Python file by its syntax tree without docstrings (``_code_text``:
    editing documentation invalidates nothing), any other file by its bytes; then the strings of
    ``extra`` (package versions, say). 16 hex digits."""
    h = hashlib.sha256()
    for p in files:
        p = Path(p)
        text = _code_text(p) if p.suffix == ".py" else p.read_bytes()
        h.update(p.relative_to(base).as_posix().encode() + b"\0" + text + b"\0")
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()[:16]
