"""``python -m tenon.services.launcher_capi`` (= ``tenon run launcher-capi``); ``--help`` lists every
setting."""

from __future__ import annotations

import sys

from tenon.runtime.service import main
from tenon.services.launcher_capi.service import SERVICE

if __name__ == "__main__":
    sys.exit(main(SERVICE))
