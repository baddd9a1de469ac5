"""Gradient-exchange methods that are more than one codec payload per tensor (Sketched-SGD's two rounds)."""
