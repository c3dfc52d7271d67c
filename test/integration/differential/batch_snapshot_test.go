package differential

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kptr "k8s.io/utils/ptr"
)

// cronJobNames renames a scheduled Job (<cronjob>-<minutes since the epoch>) to
// <cronjob>-<+Nm>, N minutes after its CronJob's creation minute.
type cronJobNames struct {
	re   *regexp.Regexp
	base map[string]int64
}

func newCronJobNames(cjs []batchv1.CronJob) cronJobNames {
	c := cronJobNames{base: map[string]int64{}}
	var names []string
	for _, cj := range cjs {
		c.base[cj.Name] = cj.CreationTimestamp.Unix() / 60
		names = append(names, regexp.QuoteMeta(cj.Name))
	}
	if len(names) > 0 {
		c.re = regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)-([0-9]{8,})\b`)
	}
	return c
}

func (c cronJobNames) text(s string) string {
	if c.re == nil {
		return s
	}
	return c.re.ReplaceAllStringFunc(s, func(m string) string {
		sub := c.re.FindStringSubmatch(m)
		minutes, _ := strconv.ParseInt(sub[2], 10, 64)
		return fmt.Sprintf("%s-<+%dm>", sub[1], minutes-c.base[sub[1]])
	})
}

// minutesAfter says how many minutes after the creation minute of the CronJob t falls.
func (c cronJobNames) minutesAfter(cronJob string, t time.Time) string {
	return fmt.Sprintf("+%dm", t.Unix()/60-c.base[cronJob])
}

func finished(j *batchv1.Job) bool {
	return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
		return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
	})
}

// batchSnapshot reads and normalises the side's Jobs, CronJobs, pods and events, and says
// whether the current step is done: every Job finished with its pods' tracking finalizers
// removed (and, with a TTL, deleted), suspended with no pods, or with all its active pods
// ready; no pod terminating; no CronJob listing a finished Job as active.
func batchSnapshot(ctx context.Context, s *side) (view, error) {
	ns := s.ns["batch"]
	jobs, jobsErr := s.f.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	cjs, cronErr := s.f.Client.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
	if err := errors.Join(jobsErr, cronErr); err != nil {
		return view{}, err
	}
	pods, evs, err := s.podsAndEvents(ctx, ns)
	if err != nil {
		return view{}, err
	}
	out := flat{}
	var pending notReady
	cron := newCronJobNames(cjs.Items)
	// Owners of pods: the Jobs, also those already deleted that events still name.
	var owners []string
	for _, j := range jobs.Items {
		owners = append(owners, j.Name)
	}
	for _, ev := range evs {
		if ev.InvolvedObject.Kind == "Job" {
			owners = append(owners, ev.InvolvedObject.Name)
		}
	}
	pn := newNormaliser(s, owners, nil)
	norm := func(v string) string { return cron.text(pn.text(v)) }

	jobByUID := map[types.UID]*batchv1.Job{}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		jobByUID[j.UID] = j
		p := "Job batch/" + norm(j.Name)
		for k, v := range j.Annotations {
			if k == batchv1.CronJobScheduledTimestampAnnotation {
				if ts, err := time.Parse(time.RFC3339, v); err == nil {
					if ref := metav1.GetControllerOf(j); ref != nil {
						v = cron.minutesAfter(ref.Name, ts)
					}
				}
			}
			out[p+" annotation "+k] = norm(v)
		}
		for k, v := range j.Labels {
			if v == string(j.UID) {
				v = "<uid>"
			}
			out[p+" label "+k] = norm(v)
		}
		putOwners(out, p, j.OwnerReferences, norm)
		st := j.Status
		out[p+" spec.suspend"] = ptr(j.Spec.Suspend)
		out[p+" status"] = fmt.Sprintf("active=%d ready=%s terminating=%s succeeded=%d failed=%d completedIndexes=%q failedIndexes=%s uncounted=%d/%d",
			st.Active, ptr(st.Ready), ptr(st.Terminating), st.Succeeded, st.Failed, st.CompletedIndexes, ptr(st.FailedIndexes),
			len(kptr.Deref(st.UncountedTerminatedPods, batchv1.UncountedTerminatedPods{}).Succeeded), len(kptr.Deref(st.UncountedTerminatedPods, batchv1.UncountedTerminatedPods{}).Failed))
		times := "startTime=" + present(st.StartTime) + " completionTime=" + present(st.CompletionTime)
		if st.StartTime != nil && st.CompletionTime != nil && st.CompletionTime.Before(st.StartTime) {
			times += " (completion before start)"
		}
		for _, c := range st.Conditions {
			// SuccessCriteriaMet may or may not fall in the same second. Complete's own
			// time may be a second after completionTime, upstream's as kshard's: both
			// controllers take completionTime from a clock read made before the pods'
			// finalizers are removed and the condition's from one made after, so the two
			// differ whenever the removal crosses a second boundary (seen once in kshard's
			// run of the "suspend" Job).
			terminal := c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed
			if terminal && st.CompletionTime != nil && withinASecond(c.LastTransitionTime, *st.CompletionTime) {
				times += " completionTime=" + string(c.Type) + ".lastTransitionTime"
			}
		}
		out[p+" times"] = times
		for i, c := range st.Conditions {
			out[p+" condition "+string(c.Type)] = fmt.Sprintf("#%d %s %s: %s", i+1, c.Status, c.Reason, norm(c.Message))
		}
		uncounted := kptr.Deref(st.UncountedTerminatedPods, batchv1.UncountedTerminatedPods{})
		switch {
		case len(uncounted.Succeeded)+len(uncounted.Failed) > 0:
			pending = append(pending, p+": uncounted terminated pods")
		case finished(j) && j.Spec.TTLSecondsAfterFinished != nil:
			pending = append(pending, p+": finished, awaiting its deletion after its TTL")
		case finished(j):
		case kptr.Deref(j.Spec.Suspend, false):
			if st.Active > 0 || !slices.ContainsFunc(st.Conditions, func(c batchv1.JobCondition) bool {
				return c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue
			}) {
				pending = append(pending, p+": not suspended yet")
			}
		case st.Active == 0 || kptr.Deref(st.Ready, 0) != st.Active:
			pending = append(pending, fmt.Sprintf("%s: %d active, %s ready", p, st.Active, ptr(st.Ready)))
		}
	}

	for i := range cjs.Items {
		cj := &cjs.Items[i]
		p := "CronJob batch/" + cj.Name
		out[p+" spec.suspend"] = ptr(cj.Spec.Suspend)
		var active []string
		for _, ref := range cj.Status.Active {
			active = append(active, norm(ref.Name))
			j, ok := jobByUID[ref.UID]
			if !ok || finished(j) {
				pending = append(pending, p+": lists "+ref.Name+" as active")
			}
		}
		sort.Strings(active)
		out[p+" active"] = strings.Join(active, ",")
		if t := cj.Status.LastScheduleTime; t != nil {
			out[p+" lastScheduleTime"] = cron.minutesAfter(cj.Name, t.Time)
		}
		if cj.Status.LastSuccessfulTime != nil {
			out[p+" lastSuccessfulTime"] = "present"
		}
	}

	podsOf := map[string]int{}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			pending = append(pending, "pod "+pod.Name+" terminating")
			continue
		}
		owner := "<no controller>"
		if ref := metav1.GetControllerOf(pod); ref != nil {
			owner = ref.Kind + " batch/" + norm(ref.Name)
			j := jobByUID[ref.UID]
			if j != nil && finished(j) && slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer) {
				pending = append(pending, "pod "+pod.Name+" of a finished Job has its tracking finalizer")
			}
			if j != nil && !finished(j) && pod.Status.Phase == corev1.PodRunning && !podReady(pod) {
				pending = append(pending, "pod "+pod.Name+" not ready")
			}
		}
		podsOf["Pods of "+owner+": "+describePod(pod, norm)]++
	}
	for k, c := range podsOf {
		out[k] = fmt.Sprint(c)
	}

	events := eventSet{withMessages: true}
	for i := range evs {
		ev := &evs[i]
		kind := ev.InvolvedObject.Kind
		if kind != "Job" && kind != "CronJob" {
			continue
		}
		events.add("batch/"+kind+" "+norm(ev.InvolvedObject.Name), ev, norm)
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}

func present[T any](p *T) string {
	if p == nil {
		return "absent"
	}
	return "present"
}

func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// describePod is a pod's normalised description: phase, what the Job controller sets
// (generateName, labels, annotations, hostname, subdomain, env) and its finalizers.
func describePod(p *corev1.Pod, norm func(string) string) string {
	var labels, annotations, env []string
	for k, v := range p.Labels {
		if ref := metav1.GetControllerOf(p); ref != nil && v == string(ref.UID) {
			v = "<uid>"
		}
		labels = append(labels, k+"="+norm(v))
	}
	for k, v := range p.Annotations {
		annotations = append(annotations, k+"="+norm(v))
	}
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			v := e.Value
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				v = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			}
			env = append(env, c.Name+":"+e.Name+"="+v)
		}
	}
	sort.Strings(labels)
	sort.Strings(annotations)
	return fmt.Sprintf("phase=%s generateName=%s hostname=%s subdomain=%s labels=[%s] annotations=[%s] env=[%s] finalizers=%v",
		p.Status.Phase, norm(p.GenerateName), norm(p.Spec.Hostname), p.Spec.Subdomain, strings.Join(labels, " "),
		strings.Join(annotations, " "), strings.Join(env, " "), p.Finalizers)
}

// withinASecond reports whether a and b are at most one second apart: metav1.Time has a
// resolution of a second.
func withinASecond(a, b metav1.Time) bool {
	d := a.Sub(b.Time)
	return d <= time.Second && d >= -time.Second
}
