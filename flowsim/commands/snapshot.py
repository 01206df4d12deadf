"""``flowsim snapshot --script``: print the sh script that saves a live machine's network for ``flowsim import``.

Run the script as root on the router (busybox ash is enough; it uses only ip,
bridge, nft, sysctl and mkdir): ``flowsim snapshot --script > snap.sh``, copy
it over, ``sh snap.sh DIR``, copy DIR back, ``flowsim import DIR -o router.toml``.
DIR gets one folder per network namespace (the initial one as init/);
docs/snapshot.md lists its files.
"""

from __future__ import annotations

import argparse
import sys

from flowsim.config.snapshot import script
from flowsim.errors import ConfigError

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("snapshot", help="print the sh script that saves a live machine's network (for flowsim import)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--script", action="store_true", required=True,
                   help="print the POSIX sh script (run it as root: sh snap.sh [DIR], DIR default flowsim-snapshot)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not args.script:
        raise ConfigError("nothing to do", expected="--script")
    sys.stdout.write(script())
    return 0
