"""dx1-mini bring-up and co-simulation framework."""

__version__ = "0.1.0"
