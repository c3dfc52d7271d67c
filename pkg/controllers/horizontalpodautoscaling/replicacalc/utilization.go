package replicacalc

import "errors"

// resourceUtilizationRatio compares the metrics of the pods that have a request with
// targetUtilization (percent of request): it returns the ratio of the current utilization
// to the target, the current utilization (total usage over total request, in whole
// percent, rounded down) and the average usage per pod counted. Samples of pods without
// a request are extraneous and skipped; when no sample has one it fails.
func resourceUtilizationRatio(metrics PodMetricsInfo, requests map[string]int64, targetUtilization int32) (ratio float64, utilization int32, average int64, err error) {
	var usage, requested int64
	n := 0
	for pod, m := range metrics {
		req, ok := requests[pod]
		if !ok {
			continue
		}
		usage += m.Value
		requested += req
		n++
	}
	if requested == 0 {
		return 0, 0, 0, errors.New("no metrics returned matched known pods")
	}
	utilization = int32(usage * 100 / requested)
	return float64(utilization) / float64(targetUtilization), utilization, usage / int64(n), nil
}

// metricUsageRatio returns the ratio of the average of metrics (rounded down) to
// targetUsage, and that average. metrics must not be empty.
func metricUsageRatio(metrics PodMetricsInfo, targetUsage int64) (ratio float64, average int64) {
	var total int64
	for _, m := range metrics {
		total += m.Value
	}
	average = total / int64(len(metrics))
	return float64(average) / float64(targetUsage), average
}
