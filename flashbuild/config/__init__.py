"""What is built: the kernel families, matrix.yaml parsed and validated, the build plan (TUs per
entry) and the memory model's estimates. Above core only."""
