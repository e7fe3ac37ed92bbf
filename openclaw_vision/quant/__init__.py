"""INT8 quantisation of the exported vision tower: calibration, Q/DQ, sensitivity, hybrid partition, gate.

Build-time only (the node just loads the resulting ONNX file). The pieces, in data-flow order:
`data` (frames → preprocessed tensors, one frame at a time; calibration / held-out split),
`graph` (which layers can be quantised and what role each plays), `workspace` (the scratch
folder: FP32 weights linked in, INT8 weights quantised once, every derived model a small graph
over them), `calibrate` (activation ranges from one pass: minmax, percentile, entropy), `qdq`
(writes the Q/DQ, switch and probe models), `evaluate` (embeddings and the gate's named checks
and rows), `sensitivity` (local SQNR in one pass; the end-to-end sweep where affordable),
`partition` (fewest float layers that pass), `memory`, `report`, and `pipeline` (the
`openclaw-vision quantize` command's job, phase by phase).
"""
