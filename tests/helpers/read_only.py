"""A read-only mount (EROFS) simulated in-process for every path under a root: running as root,
chmod stops nothing, so the refusal is patched into os.open, os.mkdir and os.rename."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest


def refuse_writes_under(monkeypatch: pytest.MonkeyPatch, root: Path | str) -> None:
    real_open, real_mkdir, real_rename = os.open, os.mkdir, os.rename

    def refuse(path: object) -> None:
        if os.fspath(path).startswith(str(root)):  # type: ignore[call-overload]
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))  # type: ignore[call-overload]

    def ro_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    def ro_mkdir(path: object, *args: object, **kwargs: object) -> None:
        refuse(path)
        real_mkdir(path, *args, **kwargs)  # type: ignore[arg-type]

    def ro_rename(src: object, dst: object) -> None:
        refuse(src)
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", ro_open)
    monkeypatch.setattr(os, "mkdir", ro_mkdir)
    monkeypatch.setattr(os, "rename", ro_rename)
