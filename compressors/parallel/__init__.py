"""CPU threading helpers of the codecs: blocks of ops on a few threads, one-thread sections."""
