"""``hil campaign``: thousands of offline scenarios of one base config on Dask."""
