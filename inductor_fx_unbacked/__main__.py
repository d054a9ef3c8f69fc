"""``python -m inductor_fx_unbacked demo``: see :mod:`inductor_fx_unbacked.demo.cli`."""

import sys

from inductor_fx_unbacked.demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
