"""``python -m tenon.services.pod_watcher`` (= ``tenon run pod-watcher``); ``--help`` lists every setting."""

from __future__ import annotations

import sys

from tenon.runtime.service import main
from tenon.services.pod_watcher.service import SERVICE

if __name__ == "__main__":
    sys.exit(main(SERVICE))
