import sys

from ccoverlap.cli import main

sys.exit(main())
