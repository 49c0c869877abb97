"""Prebuilding every kernel a model's serving can pick: specs.py (what to build), presets.py
(model shapes), check.py (the GPU check of the built kernels), cli.py (the command line)."""
