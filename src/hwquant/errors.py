"""Exceptions raised by hwquant. All derive from ValueError where bad input is the cause,
so callers can catch the broad class or the precise one."""


class HwquantError(Exception):
    """Base class of the toolkit's own errors."""


class InvalidTPCError(HwquantError, ValueError):
    """A target platform description (object or JSON file) makes no sense or cannot be read."""


class InvalidConfigError(HwquantError, ValueError):
    """A configuration object or argument is invalid."""


class ExportError(HwquantError, ValueError):
    """A model cannot be exported as asked (format, model, path or file)."""


class FileWriteError(HwquantError, OSError):
    """A file could not be written (read-only folder, full disk...); the target is untouched and no
    temporary file is left. errno / strerror / filename are the failure's, filename the target."""

    def __init__(self, path, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.message = f"cannot write '{path}': {cause.strerror or cause}; choose a writable folder"

    def __str__(self) -> str:
        return self.message


class UnsafeModelFileError(HwquantError, ValueError):
    """A model file would run code when loaded (a pickle naming functions or classes beyond the allowlist, a Keras
    Lambda layer's Python bytecode, ...) or read files outside its folder (ONNX external data), and it was not
    marked trusted. The message names what the file asks for and the ways out (hwquant.model_files)."""
