"""Measured wall-clock timing."""
