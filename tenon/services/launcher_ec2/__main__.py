"""``python -m tenon.services.launcher_ec2``: the same as ``tenon run launcher-ec2``."""

from __future__ import annotations

import sys

from tenon.runtime.service import main
from tenon.services.launcher_ec2.service import SERVICE

if __name__ == "__main__":
    sys.exit(main(SERVICE))
