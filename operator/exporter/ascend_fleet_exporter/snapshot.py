"""torch_npu memory snapshots on demand: asked for over HTTP, written by every engine process with an NPU.

torch_npu (Ascend Extension for PyTorch 6.0.0 and later) mirrors PyTorch's CUDA memory tooling:
``torch_npu.npu.memory._dump_snapshot(path)`` pickles the caching allocator's segments and their blocks
(sizes, allocated or free), plus allocation stacks if ``_record_memory_history()`` ran earlier in the process.
It sees only the allocator of the process that calls it, so one request must reach every engine process:

1. ``POST /memory-snapshot`` on the exporter's port (answered by whichever engine process holds it) writes a
   request, ``snapshot-request.json``, into the pod's spool directory and answers with where the files go;
2. every process with an NPU sees the request at its next allocator sample and writes
   ``snapshots/<id>/<pid>.pickle`` there (or ``<pid>.txt`` saying why it could not);
3. ``GET /memory-snapshot`` lists the files written so far; ``kubectl cp`` collects them.

The path is off unless ``ASCEND_FLEET_EXPORTER_SNAPSHOTS`` is on, and behind a door (``door.py``). What it
writes is bounded: the request file is one file, replaced; of the snapshot directories the newest ``keep``
stay (the oldest are removed, by the exporter that takes a new request and by each process after writing),
and a file over ``max_bytes`` is replaced by a note saying so.

Without torch_npu in the engine's environment the request is answered with a sentence saying so. The
module never imports torch_npu: it uses the one the engine imported (``sys.modules``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ascend_fleet_exporter.config import DEFAULT_SNAPSHOT_KEEP, DEFAULT_SNAPSHOT_MAX_BYTES

SNAPSHOT_PATH = "/memory-snapshot"
REQUEST_FILE = "snapshot-request.json"
SNAPSHOTS_DIR = "snapshots"

NO_TORCH_NPU = (
    "no memory snapshot: torch_npu is not installed in this engine's environment, so there is no NPU "
    "allocator to snapshot; snapshots need an engine image with torch_npu (Ascend Extension for PyTorch "
    "6.0.0 or later)"
)


@dataclass(frozen=True)
class Answer:
    """What the HTTP endpoint answers: a status code and a plain-text body."""

    status: int
    text: str


def snapshot_dir(spool: Path, request_id: str) -> Path:
    """Where the processes write the files of one request."""
    return spool / SNAPSHOTS_DIR / request_id


def prune(spool: Path, keep: int, spare: str | None = None) -> list[Path]:
    """Remove the oldest snapshot directories until at most ``keep`` are left (never ``spare``); the removed.

    Request ids are UTC times to the millisecond, so their names sort oldest first.
    """
    root = spool / SNAPSHOTS_DIR
    try:
        found = sorted(path for path in root.iterdir() if path.is_dir() and path.name != spare)
    except OSError:
        return []
    room = max(0, keep - (1 if spare is not None and (root / spare).is_dir() else 0))
    removed = found[: max(0, len(found) - room)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def request_snapshot(
    spool: Path, interval: float, now: float | None = None, keep: int = DEFAULT_SNAPSHOT_KEEP
) -> Answer:
    """Write a snapshot request for every engine process of the pod; the answer says where to find the files.

    Room is made for it first: of the snapshots already there, the newest ``keep - 1`` stay.
    """
    now = time.time() if now is None else now
    request_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    spool.mkdir(parents=True, exist_ok=True)
    prune(spool, keep - 1)
    temporary = spool / f".{REQUEST_FILE}.tmp"
    temporary.write_text(json.dumps({"id": request_id, "at": now}), encoding="utf-8")
    os.replace(temporary, spool / REQUEST_FILE)
    target = snapshot_dir(spool, request_id)
    return Answer(
        202,
        f"snapshot {request_id} requested: each engine process with an NPU writes {target}/<pid>.pickle "
        f"within {interval:g} s (GET {SNAPSHOT_PATH} lists them); copy them with "
        f"kubectl cp <namespace>/<pod>:{target} ./{request_id}\n",
    )


def requested(spool: Path) -> str | None:
    """The id of the pod's latest snapshot request, or None when there is none (or it cannot be read)."""
    try:
        request = json.loads((spool / REQUEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    return request_id if isinstance(request_id, str) and request_id else None


def listing(spool: Path) -> Answer:
    """``GET /memory-snapshot``: every file written so far, one path a line."""
    root = spool / SNAPSHOTS_DIR
    files = sorted(str(path) for path in root.glob("*/*") if path.is_file()) if root.is_dir() else []
    if not files:
        return Answer(200, f"no memory snapshot yet; POST {SNAPSHOT_PATH} asks for one\n")
    return Answer(200, "".join(f"{path}\n" for path in files))


def dump_function(module: ModuleType | None) -> Callable[[str], object] | None:
    """torch_npu's ``npu.memory._dump_snapshot``, or None when this torch_npu has none."""
    memory = getattr(getattr(module, "npu", None), "memory", None)
    dump = getattr(memory, "_dump_snapshot", None)
    return dump if callable(dump) else None


class SnapshotTaker:
    """One engine process's side: writes its snapshot once per new request."""

    def __init__(
        self,
        spool: Path,
        pid: int | None = None,
        keep: int = DEFAULT_SNAPSHOT_KEEP,
        max_bytes: int = DEFAULT_SNAPSHOT_MAX_BYTES,
    ) -> None:
        self.spool = spool
        self.pid = os.getpid() if pid is None else pid
        self.keep, self.max_bytes = keep, max_bytes
        # A request made before this process started is not for it: only later ones are answered.
        self._answered = requested(spool)

    def take_if_requested(self) -> Path | None:
        """Write this process's snapshot if a new request is there; returns the file written, if any."""
        request_id = requested(self.spool)
        if request_id is None or request_id == self._answered:
            return None
        self._answered = request_id
        written = self._take(request_id)
        prune(self.spool, self.keep, spare=request_id)
        return written

    def _take(self, request_id: str) -> Path:
        target = snapshot_dir(self.spool, request_id)
        target.mkdir(parents=True, exist_ok=True)
        dump = dump_function(sys.modules.get("torch_npu"))
        if dump is None:
            note = target / f"{self.pid}.txt"
            note.write_text(
                f"process {self.pid}: this torch_npu has no npu.memory._dump_snapshot (it came with Ascend "
                "Extension for PyTorch 6.0.0); no snapshot written\n",
                encoding="utf-8",
            )
            return note
        path = target / f"{self.pid}.pickle"
        try:
            dump(str(path))
        except Exception as error:  # the engine's allocator refused: say so beside the others' files
            note = target / f"{self.pid}.txt"
            note.write_text(f"process {self.pid}: _dump_snapshot failed: {error}\n", encoding="utf-8")
            return note
        size = path.stat().st_size if path.exists() else 0
        if size > self.max_bytes:  # /dev/shm is the pod's memory: a file over the bound does not stay
            path.unlink(missing_ok=True)
            note = target / f"{self.pid}.txt"
            note.write_text(
                f"process {self.pid}: the snapshot was {size} bytes, over the {self.max_bytes} bytes a snapshot "
                "may keep (ASCEND_FLEET_EXPORTER_SNAPSHOT_MAX_BYTES); removed\n",
                encoding="utf-8",
            )
            return note
        return path
