import sys

from flowsim.cli import main

sys.exit(main())
