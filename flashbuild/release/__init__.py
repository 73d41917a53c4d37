"""What a build hands over and how it is checked: export, manifest, consumer packages, provenance,
the library and tarball checks, and the standalone verifier. Above core and sources; the
verifier packs this layer with the core modules it imports (release/verifier.py)."""
