"""One error family for the driver; each kind of failure has its own exit code.

Tasks catch `FlashBuildError` at the top and turn it into a message on stderr and
its exit code, so a user never sees a traceback for a problem they can fix.
"""


class FlashBuildError(Exception):
    exit_code = 1
    kind = "error"

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def report(self) -> str:
        text = f"{self.kind}: {self.message}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class ConfigError(FlashBuildError):
    """matrix.yaml, command-line arguments or the lock file are wrong."""

    exit_code = 2
    kind = "config error"


class SourceError(FlashBuildError):
    """Fetching, verifying or extracting an upstream source failed."""

    exit_code = 3
    kind = "source error"


class EnvironmentProblem(FlashBuildError):
    """The host lacks something the pipeline needs (Docker engine, mmdebstrap, ...)."""

    exit_code = 4
    kind = "environment error"


class ImageError(FlashBuildError):
    """The toolchain image could not be bootstrapped or built."""

    exit_code = 5
    kind = "image error"


class CompileError(FlashBuildError):
    """A translation unit, the link or the test binary failed to build."""

    exit_code = 6
    kind = "compile error"


class VerifyError(FlashBuildError):
    """A built library failed its symbol, architecture or linkage checks."""

    exit_code = 7
    kind = "verify error"


class ExportError(FlashBuildError):
    """Artifacts could not be written."""

    exit_code = 8
    kind = "export error"


class EngineLost(FlashBuildError):
    """The Docker engine, or the build's own container, went away while the build ran."""

    exit_code = 9
    kind = "engine error"
