"""The tools a person runs from the command line on top of everything else: `label` and `text` (the text
tower and zero-shot labels without ROS), `ask` (encoder + VLM on one frame of a bag), and `bag sample` /
`replay` (rosbag2 in and out of a running node). Each module holds its commands' flags and run
functions (commands.Command); cli.py lists them. One layer up from ros/ and build: they combine them.
"""
