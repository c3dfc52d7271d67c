package kubeclient

import (
	"errors"
	"fmt"
	"math"
)

// ValidateRateLimit reports a client-side rate limit that client-go would not enforce as
// written. client-go builds its token bucket only when QPS > 0: a NaN, zero or negative
// --kube-api-qps silently means no limit at all (NaN fails every comparison), and +Inf
// means the same. A burst below 1 lets no request through the bucket. qpsFlag and
// burstFlag name the flags in the errors (e.g. "kube-api-qps").
func ValidateRateLimit(qpsFlag string, qps float32, burstFlag string, burst int) error {
	var errs []error
	if q := float64(qps); math.IsNaN(q) || math.IsInf(q, 0) || q <= 0 {
		errs = append(errs, fmt.Errorf("--%s=%v: must be a finite number above 0 "+
			"(client-go turns the rate limit off for anything else)", qpsFlag, qps))
	}
	if burst < 1 {
		errs = append(errs, fmt.Errorf("--%s=%d: must be at least 1", burstFlag, burst))
	}
	return errors.Join(errs...)
}
