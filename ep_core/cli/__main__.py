import sys

from ep_core.cli import main

sys.exit(main())
