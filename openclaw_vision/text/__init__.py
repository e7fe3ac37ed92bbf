"""The text side of CLIP at run time: tokenizer, ONNX text encoder, zero-shot label scores.

No torch here (the text tower is exported to ONNX by `models/`), no model hub: the tokenizer's
BPE merges file is the one open_clip's own wheel ships (see `merges.py`).
"""
