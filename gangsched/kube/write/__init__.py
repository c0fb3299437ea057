"""Writers: what carries the core's decisions to the API server (bindings, evictions,
restarts, events, pod conditions, PodGroup status) and the helpers they share."""
