"""The ways a checkpoint fails, each a one-line error: another run's checkpoint, none intact, a
failed write (a full disk), and the words that say so (:func:`fingerprint_diff`, :func:`one_line`).
"""

from __future__ import annotations

import errno
from typing import Any


class CheckpointMismatchError(RuntimeError):
    """A checkpoint cannot be restored into this run (different config or state structure)."""


class CheckpointCorruptError(RuntimeError):
    """No checkpoint of the run reads back intact; the message is one line."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, an unwritable directory): its partial
    files are removed, the checkpoints written before stay; the message is one line."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the disk is full: an ``OSError`` with ``ENOSPC``, or TensorStore's
    ``ValueError('RESOURCE_EXHAUSTED: ... No space left on device [os_error_code=28]')``."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "No space left on device" in text


def _without_reprs(text: str) -> str:
    """``text`` with each ``<bound method NAME of <...>>`` (what some orbax and TensorStore
    errors hold instead of a message, e.g. a pybind11 function record) replaced by ``NAME``."""
    marker = "<bound method "
    while (start := text.find(marker)) >= 0:
        depth, end = 0, len(text)
        for i in range(start, len(text)):
            depth += {"<": 1, ">": -1}.get(text[i], 0)
            if depth == 0:
                end = i + 1
                break
        name = text[start + len(marker) : end].split(" ", 1)[0].rstrip(">")
        text = text[:start] + name.rsplit(".", 1)[-1] + text[end:]
    return text


def one_line(err: BaseException, limit: int = 160) -> str:
    text = _without_reprs(" ".join(str(err).split()))
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _flatten_dict(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten_dict(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def fingerprint_diff(saved: dict[str, Any], current: dict[str, Any], limit: int = 4) -> str:
    """``"network.hidden_size: 16 (checkpoint) != 32 (this run), ..."`` for differing keys."""
    a = _flatten_dict({k: v for k, v in saved.items() if k != "hash"})
    b = _flatten_dict({k: v for k, v in current.items() if k != "hash"})
    diffs = [
        f"{k}: {a.get(k, '<unset>')!r} (checkpoint) != {b.get(k, '<unset>')!r} (this run)"
        for k in sorted(set(a) | set(b))
        if a.get(k, "<unset>") != b.get(k, "<unset>")
    ]
    more = f", and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more
