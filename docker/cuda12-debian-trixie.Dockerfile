# CUDA 12 toolchain for building the library: Debian trixie's nvidia-cuda-toolkit (12.4,
# non-free), binutils and cuobjdump for verification, GNU time for per-TU peak RSS.
# BASE is a Debian trixie root filesystem: pulled when a registry answers, otherwise
# bootstrapped from the Debian archive by flashbuild/images.py.
ARG BASE
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
# No recommends: they add ~2.5 GB (profilers, docs, GL) that compiling never uses.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      nvidia-cuda-toolkit binutils time ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
# Tools that matrix.yaml adds from pinned sources (images.<name>.ptxas: a newer CUDA 12
# ptxas, which assembles the 12.4 front end's PTX into faster SM90 code). /usr/local/bin
# comes before /usr/bin on the PATH, where nvcc looks for ptxas.
COPY tools/ /usr/local/bin/
RUN nvcc --version && ptxas --version && cuobjdump --version && test -f /usr/lib/x86_64-linux-gnu/libcudart_static.a
