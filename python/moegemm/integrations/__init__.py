"""Adapters that let model libraries run their MoE layers on moegemm. Each submodule imports its
library; this package imports none, so `import moegemm` never pulls one in."""
