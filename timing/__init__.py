"""Time on the host: the monotonic clock and sleeps used inside kernels, thread scheduling,
deferred signals, and lateness statistics."""
