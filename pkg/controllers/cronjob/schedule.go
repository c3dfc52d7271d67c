package cronjob

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// Time zone data in the binary, as kube-controller-manager embeds it: spec.timeZone
	// must resolve in a shard image without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// tooManyMissed is how many missed schedule times make the "too many missed start times"
// warning: more than 100, as upstream.
const tooManyMissed = 100

// scheduleSpec returns the schedule to parse: spec.schedule, prefixed with "TZ=<zone> "
// when spec.timeZone names a zone this process knows. A schedule that carries its own
// TZ= or CRON_TZ= is used as it is, with an "UnsupportedSchedule" warning when rec is set.
func scheduleSpec(cj *batchv1.CronJob, rec record.EventRecorder) string {
	if strings.Contains(cj.Spec.Schedule, "TZ") {
		if rec != nil {
			rec.Eventf(cj, corev1.EventTypeWarning, ReasonUnsupportedSchedule,
				"CRON_TZ or TZ used in schedule %q is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
				cj.Spec.Schedule)
		}
		return cj.Spec.Schedule
	}
	if cj.Spec.TimeZone == nil {
		return cj.Spec.Schedule
	}
	if _, err := time.LoadLocation(*cj.Spec.TimeZone); err != nil {
		return cj.Spec.Schedule
	}
	return "TZ=" + *cj.Spec.TimeZone + " " + cj.Spec.Schedule
}

// parseSchedule parses a standard cron expression (five fields, or a descriptor such as
// @hourly or @every 5m, optionally prefixed TZ=/CRON_TZ=). The parser can panic on some
// malformed input; that is an error too.
func parseSchedule(spec string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("invalid schedule format: %v", r)
		}
	}()
	return cron.ParseStandard(spec)
}

// missed is what lies between the earliest time a CronJob may run from and now.
type missed struct {
	// earliest is lastScheduleTime, or the creation time, raised to now minus
	// startingDeadlineSeconds when that is asked for and later.
	earliest time.Time
	// latest is the most recent schedule time in (earliest, now], or nil.
	latest *time.Time
	// count approximates how many schedule times fell in (earliest, now]: 0 when the
	// first is after now or the second is, otherwise from the interval between the
	// first two.
	count int64
}

var errScheduleInterval = errors.New("time difference between two schedules is less than 1 second")

// missedSince returns the schedule times cj missed up to now. With deadline,
// startingDeadlineSeconds bounds how far back it looks. A schedule that parses but never
// falls twice a second apart (31 February) is an error.
func missedSince(cj *batchv1.CronJob, now time.Time, sched cron.Schedule, deadline bool) (missed, error) {
	m := missed{earliest: cj.CreationTimestamp.Time}
	if cj.Status.LastScheduleTime != nil {
		m.earliest = cj.Status.LastScheduleTime.Time
	}
	if deadline && cj.Spec.StartingDeadlineSeconds != nil {
		if bound := now.Add(-time.Duration(*cj.Spec.StartingDeadlineSeconds) * time.Second); bound.After(m.earliest) {
			m.earliest = bound
		}
	}
	first := sched.Next(m.earliest)
	second := sched.Next(first)
	switch {
	case now.Before(first):
		return m, nil
	case now.Before(second):
		m.latest = &first
		return m, nil
	}
	interval := int64(second.Sub(first).Round(time.Second).Seconds())
	if interval < 1 {
		return m, errScheduleInterval
	}
	m.count = int64(now.Sub(first).Seconds())/interval + 1
	// Jump close to now by whole intervals, one interval short of the estimate so that
	// irregular schedules (30 6-16/4 * * 1-5) are walked by the parser over the last
	// stretch, then walk to the last time not after now.
	from := first.Add(time.Duration((m.count-2)*interval) * time.Second)
	var latest time.Time
	for t := sched.Next(from); !t.After(now); t = sched.Next(t) {
		latest = t
	}
	if !latest.IsZero() {
		m.latest = &latest
	}
	return m, nil
}

// requeueAfter returns how long until the sync after cj's next schedule time (plus
// nextScheduleDelta), ignoring startingDeadlineSeconds.
func requeueAfter(cj *batchv1.CronJob, now time.Time, sched cron.Schedule) time.Duration {
	m, err := missedSince(cj, now, sched, false)
	from := now
	switch {
	case err != nil:
	case m.latest != nil:
		from = *m.latest
	case m.count == 0:
		from = m.earliest
	}
	return sched.Next(from).Add(nextScheduleDelta).Sub(now)
}

// unmetScheduleTime returns the most recent schedule time of cj not after now and after
// both lastScheduleTime (or creation) and now minus startingDeadlineSeconds, or nil.
// More than tooManyMissed missed times are reported with a "TooManyMissedTimes" warning.
func (c *Controller) unmetScheduleTime(cj *batchv1.CronJob, now time.Time, sched cron.Schedule) (*time.Time, error) {
	m, err := missedSince(cj, now, sched, true)
	if m.latest == nil || m.latest.After(now) {
		return nil, err
	}
	if m.count > tooManyMissed {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonTooManyMissedTimes,
			"too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew")
	}
	return m.latest, err
}
