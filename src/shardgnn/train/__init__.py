"""Training drivers (single-process now; distributed drivers build on the same pieces)."""
