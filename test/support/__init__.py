"""Helpers shared by the test tiers (importable as `support.*`: test/ is on sys.path)."""
