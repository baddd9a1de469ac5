"""The payload wire format and bit packing."""
