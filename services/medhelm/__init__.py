from medhelm.version import __version__  # noqa: F401
