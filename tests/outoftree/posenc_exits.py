"""A plug-in module that ends the interpreter when imported (``sys.exit(0)``): posenc must report
it as an error, never exit 0 as if all were well (the tests put this directory on ``sys.path``)."""

import sys

sys.exit(0)
