"""`matrix-sources` and its subcommands (main.py: the parser). Each is a thin front: the
work is done by indexer/ and appservice/homeserver/; nothing here is imported by the
running service."""

import os
import signal

# As PID 1 (the container image's entrypoint) a process gets no SIGTERM it has no handler
# for: `podman stop` would wait 10 s, then kill it. Set here, before the command's imports
# (a second, under load): until the command sets its own (`run` once the service is
# built, `worker`), SIGTERM ends it at once with 143, as it ends any other process.
if os.getpid() == 1:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
