"""The standalone verifier's command line (verifier.py packs it): one tarball checked in
artifact_verify's stages, the library's checks with the host's tools; the report on stdout, an
error and its exit code on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashbuild.release import artifact_verify, checks, release_checks
from flashbuild.core.errors import ConfigError, FlashBuildError


def main(argv: list[str] | None = None) -> int:
    """Verify one tarball; the report on stdout, an error and its exit code on stderr."""
    parser = argparse.ArgumentParser(prog=Path(sys.argv[0]).name,
                                     description="Verify a flash_attn_standalone tarball: its .sha256, provenance "
                                                 "and signature beside it, then what it holds.")
    parser.add_argument("tarball", type=Path, help="the .tar.gz, with its .sha256 and provenance beside it")
    parser.add_argument("--allowed-signers", type=Path,
                        help="ssh allowed-signers file that the provenance signature must match")
    args = parser.parse_args(argv)
    try:
        target = args.tarball.resolve()
        if not target.is_file() or not release_checks.is_tarball(target):
            raise ConfigError(f"{args.tarball} is not a tarball here",
                              fix="pass the exported .tar.gz (its .sha256 and provenance beside it)")
        artifact_verify.check_allowed_signers(args.allowed_signers)
        report = artifact_verify.verify_tarball(target, args.allowed_signers, artifact_verify.host_library_checks)
        tools_only = all(c.ok or c.name == artifact_verify.TOOLS_CHECK for c in report.checks)
        checks.raise_if_failed(report, "install the tools named above and run it again (every other check passed)"
                               if tools_only else
                               "do not use this tarball: fetch it again from its release, with the files beside it")
        print(report.render())
        return 0
    except FlashBuildError as error:
        print(error.report(), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
