"""``python -m hilrig.cli``: the ``hil`` command."""
from hilrig.cli.main import main

raise SystemExit(main())
