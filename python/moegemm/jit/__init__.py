"""JIT compilation of moegemm kernels and their on-disk cache (README.md, "The JIT cache").
Importing this package is cheap: no torch, no CUDA, no subprocess."""

from .cache import KernelNotCachedError, build_or_load, cache_root, invalidate, key_for, lookup
from .compiler import CompileError
from .cubin import count_cubin_kernels
from .include_tree import include_tree_digest, library_include_dir
from .runtime import load_kernel
from .spec import KernelSpec

__all__ = [
    "CompileError",
    "KernelNotCachedError",
    "KernelSpec",
    "build_or_load",
    "cache_root",
    "count_cubin_kernels",
    "include_tree_digest",
    "invalidate",
    "key_for",
    "library_include_dir",
    "load_kernel",
    "lookup",
]
