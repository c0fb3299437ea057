"""Kubernetes wire formats (JSON objects, labels, annotations) read into the core's model.

Pure: these readers import the core, the standard library and the CEL library (``cel.py``)
only, so the scheduler's Kubernetes adapter, the simulator and ``kubectl gang`` share one reading
of every object.
"""
