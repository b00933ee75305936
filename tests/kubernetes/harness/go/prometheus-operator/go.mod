module raylab.test/harness/prometheus-operator

go 1.24.0

// Not built: build.sh copies its ServiceMonitor CRD (example/prometheus-operator-crd)
// next to helm, for the chart's tests.
require github.com/prometheus-operator/prometheus-operator v0.85.0
