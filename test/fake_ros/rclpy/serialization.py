"""rclpy.serialization: not faked (no message types here)."""


def serialize_message(msg):
    raise NotImplementedError("the fake rclpy has no message types")


def deserialize_message(raw, cls):
    raise NotImplementedError("the fake rclpy has no message types")
