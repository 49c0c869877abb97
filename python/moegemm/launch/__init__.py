"""The launch layer, below the public functions (api/) and the fused layers (moe/, ep/): the
argument checks' building blocks (checks.py), the per-device facts and knobs (device.py), the
problem records (problems.py) and the signature-keyed plans with the entry protocol every call
follows (plans.py). It asks the family registry for configs, kernels and launchers and never
imports the layers above it."""

OPS_NAMESPACE = "moegemm"  # the torch.library namespace of every moegemm custom op
