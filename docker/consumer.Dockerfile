# What a consumer of the artifact builds with: the toolchain image (same compiler, CUDA headers,
# libcudart_static) plus CMake, make and pkg-config. A separate image on top of the toolchain, so
# that adding them changes neither the toolchain image nor the id every cached object is keyed by.
ARG TOOLCHAIN
FROM ${TOOLCHAIN}
# Debian's toolkit brings g++-13 (nvcc's host compiler) but no plain `g++`.
ENV CC=gcc-13 CXX=g++-13
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake make pkgconf \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
RUN cmake --version && pkg-config --version && "$CXX" --version
