package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/test/framework"
)

// runLabel marks this run's Deployments and pods, so the pod watch sees only them.
const runLabel = "kshard.io/e2e-chaos"

// deployment is the one Deployment of every workload namespace.
const deployment = "web"

// workload is the Deployments the chaos runs roll out and scale: one per namespace
// (maxSurge 1, maxUnavailable 0), plus in each namespace the ConfigMap the audit
// controller reconciles.
type workload struct {
	f   *framework.Framework
	run string
	nss []string

	image    atomic.Int64
	rollouts atomic.Int64
	scales   atomic.Int64
	errors   atomic.Int64
}

func newWorkload(t *testing.T, f *framework.Framework, namespaces int) *workload {
	t.Helper()
	w := &workload{f: f, run: f.RunID + "-" + fmt.Sprint(time.Now().UnixNano()%1e6)}
	w.image.Store(1)
	var mu sync.Mutex
	err := framework.Parallel(namespaces, 8, func(int) error {
		ns := f.Namespace(t, nil).Name
		ctx := context.Background()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{audit.Label: "true"}}}
		if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the audit ConfigMap in %s: %w", ns, err)
		}
		d := framework.NewRollingDeployment(deployment, 3, intstr.FromInt32(1), intstr.FromInt32(0), imageName(1), map[string]string{runLabel: w.run})
		d.Labels = map[string]string{runLabel: w.run}
		// Stretches each rollout step, so that rollouts are still going when faults hit.
		d.Spec.MinReadySeconds = 1
		if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Deployment %s/%s: %w", ns, deployment, err)
		}
		mu.Lock()
		w.nss = append(w.nss, ns)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func imageName(n int64) string { return fmt.Sprintf("registry.k8s.io/e2e/chaos:v%d", n) }

func (w *workload) selector() string { return runLabel + "=" + w.run }

// drive changes Deployments until ctx ends: every 0.5–2.5s one of them gets a new image
// (a rollout) or a new replica count (2–5), at random. Errors (the API server may be down)
// are counted, not fatal.
func (w *workload) drive(ctx context.Context, rng *rand.Rand) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))):
		}
		ns := w.nss[rng.IntN(len(w.nss))]
		var patch []byte
		rollout := rng.IntN(2) == 0
		if rollout {
			patch = fmt.Appendf(nil, `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":%q}]`, imageName(w.image.Add(1)))
		} else {
			patch = fmt.Appendf(nil, `[{"op":"replace","path":"/spec/replicas","value":%d}]`, 2+rng.IntN(4))
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := w.f.Client.AppsV1().Deployments(ns).Patch(pctx, deployment, types.JSONPatchType, patch, metav1.PatchOptions{})
		cancel()
		switch {
		case err != nil:
			w.errors.Add(1)
		case rollout:
			w.rollouts.Add(1)
		default:
			w.scales.Add(1)
		}
	}
}

// incomplete returns what keeps the Deployments from having completed their latest
// rollouts (nil when all have).
func (w *workload) incomplete(ctx context.Context) []error {
	list, err := w.f.Client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: w.selector()})
	if err != nil {
		return []error{err}
	}
	if len(list.Items) != len(w.nss) {
		return []error{fmt.Errorf("%d Deployments listed, %d created", len(list.Items), len(w.nss))}
	}
	var pending []error
	for i := range list.Items {
		if err := framework.DeploymentComplete(&list.Items[i]); err != nil {
			pending = append(pending, err)
		}
	}
	return pending
}

// leftovers returns the Deployments with pods or replicas in a ReplicaSet other than
// the newest: an old ReplicaSet not scaled down after the rollout completed.
func (w *workload) leftovers(ctx context.Context) ([]string, error) {
	list, err := w.f.Client.AppsV1().ReplicaSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: w.selector()})
	if err != nil {
		return nil, err
	}
	withPods := map[string][]string{}
	for _, rs := range list.Items {
		if rs.Status.Replicas > 0 || (rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0) {
			withPods[rs.Namespace] = append(withPods[rs.Namespace], rs.Name)
		}
	}
	var out []string
	for _, ns := range w.nss {
		if n := len(withPods[ns]); n != 1 {
			out = append(out, fmt.Sprintf("%s: ReplicaSets with replicas %v, want exactly the newest", ns, withPods[ns]))
		}
	}
	return out, nil
}
