"""Drop-in replacements for other libraries' evaluation entry points.

Each submodule mirrors one library's public surface on top of this library's ranking; import the
submodule you need (for example ``from retrieval_metrics.compat.pml import AccuracyCalculator``).
Submodules are not imported here, so that importing one never pulls in another's dependencies.
"""
