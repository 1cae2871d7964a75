"""A robot from its URDF as a compiled chain (docs/URDF.md): ``parse`` reads the file once
into flat arrays, ``dynamics`` holds the numba kernels (forward kinematics, RNEA, CRBA)
and the chain's mechanism, ``model`` registers ``plant.model = "urdf"``. ``robots/``
holds the shipped mesh-free URDFs (Panda, UR5, Kinova Jaco) with their licences."""
