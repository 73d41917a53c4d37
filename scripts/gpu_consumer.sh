#!/usr/bin/env bash
# On a GPU host: unpack an exported tarball as copied (checksums first), build examples/consumer
# against it with CMake and with pkg-config (examples/consumer/build.sh), and run both programs.
# Needs a CUDA 12 toolkit's headers and libcudart_static (found in /usr/local/cuda or through
# nvcc on PATH; CUDA_HOME overrides). Usage: gpu_consumer.sh TARBALL
set -euo pipefail
tarball=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$(dirname "$tarball")" && sha256sum -c "$(basename "$tarball").sha256")
tar -xzf "$tarball" -C "$work"
root=$(find "$work" -mindepth 1 -maxdepth 1 -type d)
(cd "$root" && sha256sum -c --quiet SHA256SUMS) && echo "SHA256SUMS: OK"
cuda=${CUDA_HOME:-}
if [[ -z $cuda ]] && command -v nvcc > /dev/null; then cuda=$(dirname "$(dirname "$(command -v nvcc)")"); fi
if [[ -z $cuda && -d /usr/local/cuda ]]; then cuda=/usr/local/cuda; fi
if [[ -n $cuda && $cuda != /usr ]]; then  # /usr: the compiler's own search paths already hold it
  export CUDA_FLAGS="-I$cuda/include -L$cuda/lib64 ${CUDA_FLAGS:-}"
  export CUDAToolkit_ROOT=$cuda
fi
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
echo "CUDA toolkit: ${cuda:-not found}; $(cmake --version 2>/dev/null | head -1 || echo 'no cmake'); pkg-config $(pkg-config --version 2>/dev/null || echo 'missing')"
bash "$here/examples/consumer/build.sh" "$root" "$work/out"
status=0 built=0
for program in "$work/out/cmake/consumer" "$work/out/consumer-pkgconfig"; do
  [[ -x $program ]] || continue
  built=$((built + 1))
  echo "== $program"
  "$program" && rc=0 || rc=$?
  echo "exit $rc"
  [[ $rc -eq 0 ]] || status=1
done
[[ $built -gt 0 ]] || { echo "nothing was built: install cmake or pkg-config and a CUDA toolkit"; exit 1; }
exit $status
