"""Small real models and real gradients for quick comparisons and training runs."""
