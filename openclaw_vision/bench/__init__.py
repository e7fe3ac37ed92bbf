"""`openclaw-vision bench`: latency you can trust, measured side by side in one run."""
