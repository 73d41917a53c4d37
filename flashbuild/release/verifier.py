"""The standalone verifier: `<tarball>.verify.pyz`, written beside every exported tarball, checks
the tarball as `invoke verify TARBALL` does (artifact_verify.py) without the build repository:

    python3 flash_attn_standalone-0.4.0-minimal-cuda12.4-sm90a.tar.gz.verify.pyz \\
        flash_attn_standalone-0.4.0-minimal-cuda12.4-sm90a.tar.gz [--allowed-signers FILE]

It is a zip application of this package's standard-library modules that verifying needs (MODULES;
Python >= 3.9, no third-party package) whose __main__ runs `verify_cli.main`. Its library checks need nm,
readelf and cuobjdump on PATH (a clone's `invoke verify` falls back to its container instead);
the package checks cmake and pkg-config, as in a clone. Same stages, same checks, same exit codes
(7: a check failed; 2: bad arguments; 4: a missing tool). `zipapp()` is byte-for-byte
deterministic (sorted members, fixed dates and modes), and the provenance statement lists its
sha256 beside the tarball's (provenance.py), so a signed statement covers the verifier too.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

SUFFIX = ".verify.pyz"
# What verifying a tarball imports, and nothing that needs a third-party package.
MODULES = ("__init__", "core/__init__", "core/errors", "core/hashing", "core/library", "core/schema_lite",
           "sources/__init__", "sources/archive", "release/__init__", "release/artifact_verify", "release/checks",
           "release/manifest", "release/package_checks", "release/packages", "release/provenance",
           "release/release_checks", "release/verifier", "release/verify_cli")
DATA = ("resources/manifest.schema.json",)
MAIN = "#!/usr/bin/env python3\nimport sys\n\nfrom flashbuild.release.verify_cli import main\n\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def zipapp() -> bytes:
    """The verifier's bytes: a shebang line, then a zip of __main__.py and flashbuild/ (MODULES, DATA)."""
    package = Path(__file__).resolve().parent.parent  # flashbuild/
    members = {"__main__.py": MAIN.encode()}
    for name in MODULES:
        members[f"flashbuild/{name}.py"] = (package / f"{name}.py").read_bytes()
    for name in DATA:
        members[f"flashbuild/{name}"] = (package / name).read_bytes()
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, members[name])
    return buffer.getvalue()
