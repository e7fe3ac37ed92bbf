"""openclaw_vision: CLIP visual embeddings for ROS 2 (see README.md).

With colcon, this file is installed over the empty __init__.py that rosidl generates for
`openclaw_vision.msg` (CMakeLists.txt): keep it free of imports, so importing the messages stays light.
"""
