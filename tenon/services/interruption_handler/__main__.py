"""``python -m tenon.services.interruption_handler``: the same as ``tenon run interruption-handler``."""

from __future__ import annotations

import sys

from tenon.runtime.service import main
from tenon.services.interruption_handler.service import SERVICE

if __name__ == "__main__":
    sys.exit(main(SERVICE))
