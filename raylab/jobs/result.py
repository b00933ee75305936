"""A job's result: the value of its cell's last expression, read back by a kernel.

A job's own driver (and its object store) is gone once it ends, and a pod's files are not
the kernel's, so the value travels in the one place both ends reach with the cluster's
token: the job's log, which Ray keeps on the head for as long as the cluster lives. The
driver writes it last, pickled (Ray's cloudpickle), base64 in lines of 64 KiB behind a
marker and the job's own random nonce, then its SHA-256; at most RESULT_LIMIT_BYTES (a
larger value fails the job with a message saying so). Whoever can read the log holds the
cluster's token, and so could run code as its owner anyway: unpickling it gives nothing
more.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import pickle
from typing import Any

from .errors import JobError

MARK = "RAYLAB-RESULT"
RESULT_LIMIT_BYTES = 8 * 2**20


def is_result_line(line: str) -> bool:
    return line.startswith(MARK + " ")


def read_result(log: str, nonce: str, job: str) -> Any:
    """The value the job with this nonce wrote into `log`."""
    chunks: dict[int, str] = {}
    digest = None
    prefix = f"{MARK} {nonce} "
    for line in log.splitlines():
        if not line.startswith(prefix):
            continue
        index, _, text = line[len(prefix) :].partition(" ")
        if index == "end":
            digest = text.strip()
        elif index.isdigit():
            chunks[int(index)] = text.strip()
    if digest is None:
        raise JobError(
            f"job {job} left no result in its log",
            detail="its cell did not end with an expression (or its value was None)",
        )
    try:
        data = base64.b64decode("".join(chunks[i] for i in range(len(chunks))), validate=True)
    except (KeyError, binascii.Error):
        data = b""
    if hashlib.sha256(data).hexdigest() != digest:
        raise JobError(f"job {job}'s result in its log is incomplete or damaged")
    try:
        # The user's own job wrote it, behind the cluster's token (see above).
        return pickle.loads(data)
    except Exception as exc:  # a class or module this kernel does not have
        raise JobError(
            f"job {job}'s result cannot be read in this kernel: {type(exc).__name__}: {exc}",
            detail="import what its value is made of in this kernel (the job's modules), "
            "then ask again",
        ) from None
