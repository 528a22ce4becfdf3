import sys

from ep_core.tools.cli import main

sys.exit(main())
