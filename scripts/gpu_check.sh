#!/usr/bin/env bash
# Unpack an exported tarball on a GPU host and run its test binary, exactly as a release
# engineer would: no build tools, the artifact as copied. Usage: gpu_check.sh TARBALL [ARGS...]
set -euo pipefail
tarball=$1; shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sha_file="$tarball.sha256"
if [[ -f $sha_file ]]; then
  (cd "$(dirname "$tarball")" && sha256sum -c "$(basename "$sha_file")")
fi
tar -xzf "$tarball" -C "$work"
root=$(find "$work" -mindepth 1 -maxdepth 1 -type d)
(cd "$root" && sha256sum -c --quiet SHA256SUMS) && echo "SHA256SUMS: OK"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
echo "glibc: $(ldd --version | head -1)"
"$root/bin/test_varlen_inference" "$@"
