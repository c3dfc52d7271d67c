// Package version holds the build version, set at link time with
// -ldflags "-X github.com/kshard/kshard/pkg/version.Version=…".
package version

// Version is the build version reported in hellos, logs and metrics.
var Version = "dev"
