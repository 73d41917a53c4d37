"""The ground floor: errors, the console, digests, signals, processes and small readers that every
other layer may use; it imports nothing of flashbuild above it."""
