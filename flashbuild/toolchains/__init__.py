"""Where compilers run: toolchain images, the container that runs them, the host toolchain, and
provisioning this machine. Above core and config."""
