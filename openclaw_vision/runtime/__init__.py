"""The run-time core above the leaves, what a node is made of besides ROS: FramePipeline (camera frames to unit
embeddings), each node's configuration (one `Param` per key: YAML, ROS parameters and CLI flags), the counters and
percentiles, named and supervised threads, and rosbag2 reading and writing.

No ROS, no GPU and no torch here (.importlinter); ros/ wires these to a transport. This file stays free of
imports: a node script imports runtime.threads first, before anything heavy.
"""
