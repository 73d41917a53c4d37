"""flashbuild: builds libflash_attn_standalone in a toolchain container, from matrix.yaml
to a verified, versioned artifact. `commands` holds what each invoke task does; the
pipeline's stages are one module each (see README.md, "How it works")."""
