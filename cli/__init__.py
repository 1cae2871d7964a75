"""The ``hil`` command line (``hil = hilrig.cli.main:main``; ``python -m hilrig.cli``)."""
