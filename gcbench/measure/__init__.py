"""Measured wall-clock timing (:mod:`.timing`), reconstruction error (:mod:`.error`) and bits per element (:mod:`.size`)."""
