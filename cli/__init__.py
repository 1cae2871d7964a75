"""The ``hil`` command line (``hil = hilrig.cli.main:main``; ``python -m hilrig.cli``):
main (the parser, main()), exits (exceptions to exit codes), options (the shared
options), one module per family of commands (runs, remote, logs, configs, analyze,
campaign), warmup (``hil warmup``'s work)."""
