"""The papers' scenarios and one rig per link, as TOML files shipped with the package.

``hil configs`` lists them; ``hil run rrr3_pd`` (and ``sim``, ``emulate``, ``control``)
takes a built-in config by name (``hilrig.settings.builtin_configs``). This package holds no
code: its files are read through ``importlib.resources``.
"""
