"""Synthesis: actions rewrite a spec, the cost model prices the result, the search keeps the cheapest."""
