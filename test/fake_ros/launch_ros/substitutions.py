"""launch_ros.substitutions.FindPackageShare; the share directory comes from SHARE_DIRS (no ament index here)."""

SHARE_DIRS: dict[str, str] = {}


class FindPackageShare:
    def __init__(self, package) -> None:
        self.package = package

    def perform(self, context) -> str:
        return SHARE_DIRS[self.package]
