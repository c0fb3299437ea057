"""gangsched: a gang-aware Kubernetes scheduler."""

__version__ = "0.1.0"
