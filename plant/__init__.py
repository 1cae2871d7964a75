"""Plant models: numba kernels over flat float64 arrays, and thin Python classes around them.

Every model is described by three arrays (see ``plant.layout``):
``params`` (built once from a config), ``x`` (the continuous state) and ``jams``
(the discrete fault state of each joint). Kernels never touch I/O or time.
"""
