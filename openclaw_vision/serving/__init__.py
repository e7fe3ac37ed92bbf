"""Serving the image encoder from a Triton Inference Server: the repository writer (repo.py) and
`openclaw-vision serve` through PyTriton (serve.py). The client side is encoders/triton.py."""
