"""The tools a person runs from the command line on top of everything else: `label` and `text` (the text
tower and zero-shot labels without ROS), `ask` (encoder + VLM on one frame of a bag), and `bag sample` /
`replay` (rosbag2 in and out of a running node), `index` / `search` (visual memory) and `demo` (the
README's main job, end to end). Each module holds its commands' flags and run functions
(core/commands.Command); cli/__init__.py lists them. One layer up from ros/, bench/ and build_tools/: they
combine them.
"""
