"""Calibrate the simulator from real traces and check predictions against measurements."""
