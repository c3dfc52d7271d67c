package job

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// A Job whose namespace leaves the shard before the pod creations it expects are seen, and
// comes back later, is managed again at once, not after the expectations' 5 minutes.
// Leaving, the shard's cache drops the Job (the handlers see a delete) and its queue admits
// no key of the namespace any more, so no sync of the gone Job forgets the expectations as
// upstream's does; coming back, the warm-up may add the pods before the Job, so their
// creations are not observed either.
func TestExpectationsForgottenWhenTheNamespaceLeaves(t *testing.T) {
	f := newFixture(t, newJob(2, 2))
	f.MustSync("ns/job")
	if n := len(f.createdPods()); n != 2 {
		t.Fatalf("created %d pods, want 2", n)
	}
	log := f.ctrl.logForTest()

	// Released before the creations were seen.
	job := f.apiJob("job")
	if err := f.Indexer(job).Delete(job); err != nil {
		t.Fatal(err)
	}
	f.ctrl.deleteJob(log, job)
	f.Queue.Keys() // dropped by the fenced queue

	// Meanwhile, at the other owner, one pod failed and was counted.
	pods := f.apiPods()
	gone := pods[0].DeepCopy()
	failed()(gone)
	untracked(gone)
	if err := f.Client.Tracker().Update(podsGVR, gone, "ns"); err != nil {
		t.Fatal(err)
	}
	job = f.apiJob("job").DeepCopy()
	job.Status.Failed = 1
	job.Status.Active = 1
	job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	if err := f.Client.Tracker().Update(jobsGVR, job, "ns"); err != nil {
		t.Fatal(err)
	}

	// Back at this shard: the warm-up adds the pods, then the Job.
	for _, p := range []*corev1.Pod{gone, pods[1]} {
		f.Cache(p)
		f.ctrl.addPod(log, p)
	}
	f.Cache(job)
	f.ctrl.addJob(log, job)
	f.Client.ClearActions()
	f.MustSync("ns/job")
	if n := len(f.createdPods()); n != 1 {
		t.Errorf("created %d pods after the namespace came back, want 1 (the failed pod's replacement); actions %v", n, f.actions())
	}
}
