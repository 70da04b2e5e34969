"""``python -m tenon.services.scheduler`` (= ``tenon run scheduler``); ``--help`` lists every setting."""

from __future__ import annotations

import sys

from tenon.runtime.service import main
from tenon.services.scheduler.service import SERVICE

if __name__ == "__main__":
    sys.exit(main(SERVICE))
