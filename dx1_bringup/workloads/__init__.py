"""Real networks run end to end on DX-1 (`dx1 run NAME`): trained, quantised, compared with references."""
