"""The HTTP side: REST routes and their response models, the token's security schemes,
Prometheus, the dashboard and the offline /docs."""
