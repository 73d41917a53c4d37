#!/usr/bin/env bash
# Build the consumer example against an unpacked artifact both ways a consumer would: CMake
# (find_package) into OUT/cmake/consumer, and the one-line pkg-config build into
# OUT/consumer-pkgconfig. A way whose tool is missing is skipped with a message.
# Usage: build.sh ARTIFACT_DIR OUT_DIR   (CXX picks the compiler; CUDA_FLAGS adds e.g.
# "-I/usr/local/cuda/include -L/usr/local/cuda/lib64" where the compiler does not find CUDA itself)
set -euo pipefail
artifact=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
if command -v cmake > /dev/null; then
  cmake -S "$here" -B "$out/cmake" -DCMAKE_PREFIX_PATH="$artifact" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$out/cmake"
else
  echo "cmake not found: the CMake build is skipped" >&2
fi
if command -v pkg-config > /dev/null; then
  # shellcheck disable=SC2046,SC2086  # the flags are words
  "${CXX:-g++}" -std=c++17 -O2 -I"$here/../common" -o "$out/consumer-pkgconfig" "$here/consumer.cpp" \
    $(PKG_CONFIG_PATH="$artifact/lib/pkgconfig" pkg-config --cflags --libs flash_attn_standalone) \
    ${CUDA_FLAGS:-} -lcudart_static -ldl -lrt -pthread
else
  echo "pkg-config not found: the pkg-config build is skipped" >&2
fi
