// Package cronjob is kshard's CronJob controller ("cronjob"), equal in behaviour to
// kube-controller-manager 1.37's: it creates a Job for each time a CronJob's schedule
// falls, and reports the Jobs it runs in the CronJob's status.
//
// One sync of a CronJob:
//
//  1. History (history.go): finished Jobs beyond successfulJobsHistoryLimit and
//     failedJobsHistoryLimit are deleted, oldest start time first.
//  2. Status from the Jobs it controls (active.go): finished Jobs leave status.active
//     ("SawCompletedJob"), succeeded ones advance lastSuccessfulTime, Jobs in
//     status.active that no longer exist leave it ("MissingJob", after a GET), unfinished
//     Jobs it controls but does not list are reported ("UnexpectedJob").
//  3. Unless the CronJob is being deleted, is suspended, or has an invalid timeZone or
//     schedule: the most recent unmet schedule time (schedule.go) since lastScheduleTime
//     (or creation), bounded below by startingDeadlineSeconds. None: requeue at the next
//     one. Past the deadline: "MissSchedule". Already run (in status.active by name, or
//     equal to lastScheduleTime): nothing. Forbid with an active Job: "JobAlreadyActive".
//     Replace: the active Jobs are deleted first. Then the Job is created (jobs.go) with
//     the deterministic name <cronjob>-<scheduled time in minutes since the epoch>, the
//     batch.kubernetes.io/cronjob-scheduled-timestamp annotation and a controller
//     reference; it joins status.active and lastScheduleTime becomes its time.
//  4. The status is written once, and the CronJob is requeued for its next schedule time
//     (plus 100 ms).
//
// Nothing the controller needs lives only in memory: the next schedule time is computed
// from the CronJob's spec and status at every sync, and the Job name is the lock against
// running one schedule twice (a create that finds its Job already there adopts it into
// status.active). So when a namespace moves to another shard, which enqueues every CronJob
// of it, a schedule that fell during the move runs exactly once (within
// startingDeadlineSeconds), as after a restart of kube-controller-manager.
package cronjob
