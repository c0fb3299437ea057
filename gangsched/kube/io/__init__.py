"""Transport: the API client, its HTTP/1.1 pool and kubeconfig, watches (reflectors), the
leader lease, the health and metrics server, the write outbox."""
