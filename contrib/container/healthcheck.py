"""The image's HEALTHCHECK (Containerfile): GET /health of the service whose config is
/data/config.yaml (or the path given), on its appservice host and port; exit 0 when it
answers 200, 1 otherwise (503 while starting, or failing: docs/deployment.md)."""

import sys
import urllib.request

from ruamel.yaml import YAML

path = sys.argv[1] if len(sys.argv) > 1 else "/data/config.yaml"
try:
    with open(path, encoding="utf-8") as f:
        section = (YAML(typ="safe").load(f) or {}).get("appservice") or {}
    host = str(section.get("host") or "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # listening everywhere
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{int(section.get('port') or 29316)}/health"
    with urllib.request.urlopen(url, timeout=8):
        pass
except Exception as e:  # unreadable config, refused, 503: all unhealthy, said why
    print(f"unhealthy: {e}")
    sys.exit(1)
print(f"healthy: {url}")
