"""Adapters between the Kubernetes API and the core: watches in; bindings, events, status out."""
