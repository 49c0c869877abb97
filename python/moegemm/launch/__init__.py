"""The launch layer, below the public functions (api/) and the fused layers (moe/, ep/): the
argument checks' building blocks (checks.py), the per-device facts and knobs (device.py), the
problem records (problems.py), the signature-keyed plans with the entry protocol every call
follows (plans.py) and the custom ops' registration for torch.compile (ops.py). It asks the
family registry for configs, kernels and launchers and never imports the layers above it."""
