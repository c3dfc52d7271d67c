package workloadstress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// kubelet ends the run's terminating pods as a kubelet does once their containers have
// stopped: a delete with grace period 0 and the pod's UID as precondition, so that it can
// never hit a later pod of the same name (kwok's pod-delete stage deletes by name, and under
// load it keeps deleting a StatefulSet's pod as soon as the controller creates it again;
// hack/kwok-stages/pod-delete.yaml exempts pods labelled holdLabel). Each pod stays
// terminating for a random 0-500ms first, so that the controllers see terminating pods.
type kubelet struct {
	cs      kubernetes.Interface
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	seen    sync.Map // UIDs handled
	ended   atomic.Int64
	errs    atomic.Int64
	lastErr atomic.Value
}

func newKubelet(cs kubernetes.Interface) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	return &kubelet{cs: cs, ctx: ctx, cancel: cancel}
}

// handler is the pod informer's handler that ends terminating pods.
func (k *kubelet) handler() cache.ResourceEventHandlerFuncs {
	on := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp == nil || p.Labels[holdLabel] == "" {
			return
		}
		if _, done := k.seen.LoadOrStore(p.UID, true); done || k.ctx.Err() != nil {
			return
		}
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			select {
			case <-k.ctx.Done():
				return
			case <-time.After(time.Duration(rand.Int64N(int64(500 * time.Millisecond)))):
			}
			uid := p.UID
			err := k.cs.CoreV1().Pods(p.Namespace).Delete(k.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
				Preconditions: &metav1.Preconditions{UID: &uid}})
			switch {
			case err == nil:
				k.ended.Add(1)
			case apierrors.IsNotFound(err), apierrors.IsConflict(err), k.ctx.Err() != nil:
			default:
				k.errs.Add(1)
				k.lastErr.Store(fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, err))
			}
		}()
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, cur any) { on(cur) }}
}

// stop ends the kubelet and waits for its deletes.
func (k *kubelet) stop() {
	k.cancel()
	k.wg.Wait()
}

// checkHoldStage fails the test early when the control plane's kwok deletes a terminating
// pod labelled holdLabel (it read its stages before hack/kwok-stages/pod-delete.yaml
// existed): of two running pods deleted with a grace period, kwok must end the unlabelled
// one and leave the labelled one terminating.
func checkHoldStage(t *testing.T, cs kubernetes.Interface, ns, node string) {
	t.Helper()
	ctx := context.Background()
	pod := func(name string, hold bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](grace),
				Containers: []corev1.Container{{Name: "c", Image: image}}}}
		if hold {
			p.Labels[holdLabel] = "true"
		}
		return p
	}
	for _, p := range []*corev1.Pod{pod("hold-probe", true), pod("control-probe", false)} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 60*time.Second, "kwok runs the probe pods", func(ctx context.Context) (bool, error) {
		for _, n := range []string{"hold-probe", "control-probe"} {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase != corev1.PodRunning {
				return false, fmt.Errorf("%s %s", n, p.Status.Phase)
			}
		}
		return true, nil
	})
	for _, n := range []string{"hold-probe", "control-probe"} {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 60*time.Second, "kwok ends the terminating control pod", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "control-probe", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("still there (%v)", err)
	})
	// kwok played the control pod's stage; the held pod's, had it one, was queued with it.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, "hold-probe", metav1.GetOptions{}); err != nil {
			t.Fatalf("kwok deleted a terminating pod labelled %s (%v): restart the control plane (kwok reads hack/kwok-stages/pod-delete.yaml when it starts)", holdLabel, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "hold-probe", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}
