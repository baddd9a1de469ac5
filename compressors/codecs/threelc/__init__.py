"""3LC (Lim et al., SysML 2019): the codec (3-value quantization, quartic encoding) and its zero-run encoding."""
