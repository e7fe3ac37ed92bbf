"""INT8 quantisation of the exported vision tower: calibration, Q/DQ, sensitivity, hybrid partition, gate.

Build-time only (the node just loads the resulting ONNX file). The pieces, in data-flow order:
`data` (frames → preprocessed tensors, calibration / held-out split), `graph` (which layers can
be quantised and what role each plays), `calibrate` (activation ranges: minmax, percentile,
entropy), `qdq` (writes the Q/DQ model), `evaluate` (embeddings and the accuracy gate),
`sensitivity` (damage of each layer alone), `partition` (fewest float layers that pass),
`memory`, `report`, and `pipeline` (the `openclaw-vision quantize` command's job).
"""
