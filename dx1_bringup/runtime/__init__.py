"""Runtime: turning layer-level work into command streams."""
