"""``python -m hilrig.cli``: the ``hil`` command.

``python -m`` puts the current folder first on ``sys.path``; the ``hil`` script does not,
and neither does this: a file in the current folder named like an installed package (a
planted ``matplotlib.py``) is never imported in its place (hilrig.plugins takes a user's
module from the current folder by its name only).
"""
import os
import sys

if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from hilrig.cli.main import main  # noqa: E402

raise SystemExit(main())
