"""MultiThreadedExecutor (Humble rclpy/executors.py): spin() blocks until shutdown(); nothing runs."""

import threading


class MultiThreadedExecutor:
    def __init__(self, num_threads=None, *, context=None) -> None:
        self._done = threading.Event()
        self.nodes = []

    def add_node(self, node) -> bool:
        self.nodes.append(node)
        return True

    def spin(self) -> None:
        self._done.wait()

    def shutdown(self, timeout_sec=None) -> bool:
        self._done.set()
        return True
