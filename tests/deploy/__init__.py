"""The deployment files: container image, systemd unit, Prometheus and Grafana."""
