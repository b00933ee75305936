"""What a cluster's workers get from the notebook: the environment a cluster remembers,
its working dir, local packages, pip requirements, env values, and the checks that they
still match the kernel (drift). Pure of backends and of the kernel's connection."""
