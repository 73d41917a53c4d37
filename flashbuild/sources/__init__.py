"""Upstream sources: pinned downloads, verified and extracted safely. Above core only."""
