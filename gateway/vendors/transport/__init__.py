"""HTTP to vendors, apart from every protocol: the clients (client.py; the gateway's own HTTP/1.1,
http1.py), proxies, the SSE reader, the reading of a 200 until it proves an answer (answers.py),
the deployments' routing and passive health (balancer.py), and what every HTTP adapter shares: a
pool per deployment and retries (http.py)."""
