"""Measured wall-clock timing (:mod:`.timing`) and reconstruction error (:mod:`.error`)."""
