"""dx1_driver: the user-space driver of DX-1."""
