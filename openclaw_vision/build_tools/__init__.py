"""The build tools: the models a node loads, made from a checkpoint (or random init) in the data home.

first_use.py builds the FP32 export, the gated INT8 model and the projected exports when a tool or the demo first
needs them; commands.py is `openclaw-vision export`, `quantize` and `build-engine`, the same builds by hand. The
work itself is models/ (towers, export), quant/ (INT8) and encoders/engine_cache.py (TensorRT engines); what a
build is called is models/naming.py, which the running node reads too. The ladder that measures them all is
bench/ladder.py.
"""
