"""The Matrix side of the service: the transaction endpoint, room state, aliases,
/messages paging, health, metrics and the running service that wires them to indexer/.
It judges nothing itself: what may be indexed is the gate's (indexer/ingest/)."""
