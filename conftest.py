"""Repository-level test configuration: the plugin's own tests drive pytest runs through ``pytester``."""

pytest_plugins = ("pytester",)
