"""``python -m tenon.services.disruption`` (= ``tenon run disruption``); ``--help`` lists every setting."""

from __future__ import annotations

import sys

from tenon.runtime.service import main
from tenon.services.disruption.service import SERVICE

if __name__ == "__main__":
    sys.exit(main(SERVICE))
