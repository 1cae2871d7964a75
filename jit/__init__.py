"""numba infrastructure: the kernel decorators and the compiled-kernel cache."""
