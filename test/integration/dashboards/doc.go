// Package dashboards tests the Grafana dashboards shipped under charts/kshard/dashboards:
// that each file is a well-formed Grafana dashboard, and that every panel's query, with its
// template variables filled, returns data from a real Prometheus scraping real coordinator
// and shard processes on the local control plane. A query that can never return data (a
// wrong metric or label name, a label the scrape does not attach) fails the test.
package dashboards
