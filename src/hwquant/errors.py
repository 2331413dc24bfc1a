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
