// Package deploy holds the deployment files of riskstream: the Prometheus
// configuration, Grafana provisioning and dashboard, next to the repository's
// Dockerfile and docker-compose.yml. It has no code; its test parses those
// files so that a typo in a service, a topic, a flag or a metric name fails
// `go test ./...` instead of a `docker compose up`.
package deploy
