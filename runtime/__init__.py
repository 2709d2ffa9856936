"""Real execution of AR / SD / PSD with torch models; the only layer that imports torch."""
