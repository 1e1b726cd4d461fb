"""What the collection's two writers share: the pipeline (upserts) and the purger.

Built before both (components.Index.open) and handed to each, so neither needs the
other: the purger holds `lock` while it deletes a room and counts the purge in
`purges`; the pipeline upserts and commits under the same lock, after checking that
no purge of the room happened since it read the room's tail (pipeline/pipeline.py, on the race).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class WriteGuard:
    lock: threading.RLock = field(default_factory=threading.RLock)
    purges: Counter[str] = field(default_factory=Counter)  # room -> purges so far
