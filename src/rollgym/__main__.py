import sys

from rollgym.cli.main import main

sys.exit(main())
