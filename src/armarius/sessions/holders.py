"""Who holds a budget reservation: this process, another live one, or one that is gone.

A reservation names its holder as ``host:pid:nonce``. A holder on this host whose process no
longer runs, or that has this process's pid with another nonce (an earlier process, as after a
restart in a container), has been interrupted: its reservation can be released at once. Any other
holder — on another host, or a pid reused by another live process — is trusted until its lease
ends.
"""

from __future__ import annotations

import os
import secrets
import socket
from functools import cache


def current_holder() -> str:
    """This process's holder name (a forked child has a pid, and so a name, of its own)."""
    return _holder_of(os.getpid())


@cache
def _holder_of(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{secrets.token_hex(6)}"


def is_gone(holder: str) -> bool:
    """True when the holder is a process of this host that has ended."""
    parts = holder.rsplit(":", 2)
    if len(parts) != 3:
        return False
    host, pid_text, _nonce = parts
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return holder != current_holder()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
