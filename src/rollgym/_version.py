"""The package's version, on the ground floor: the door (``rollgym.__version__``) and the
instrumentation scope of every span (``telemetry/_state.py``) read it from here, so telemetry
never imports the package door above it."""

__version__ = "0.1.0"
