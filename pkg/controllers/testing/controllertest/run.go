package controllertest

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/controllers"
)

// Run is for a test that runs its controller on running informers instead of filling
// the caches by hand: it starts factory's informers and, once their caches are synced and
// the watches of resources (plural names, e.g. "pods") are open (see Watches), runs ctrl
// with workers until the test ends, when the cleanup stops it, shuts queue down, waits for
// it and shuts the informers down. Field-selected informers the controller asked for run
// too, as views of the factory's informers of their types.
func Run(t testing.TB, ctx context.Context, ctrl controllers.Controller, workers int,
	queue workqueue.TypedRateLimitingInterface[string], factory informers.SharedInformerFactory,
	watches *Watches, resources ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	selectedOf(factory).start(ctx)
	watches.Wait(t, resources...)
	done := make(chan struct{})
	go func() { defer close(done); ctrl.Run(ctx, workers) }()
	t.Cleanup(func() {
		cancel()
		queue.ShutDown()
		<-done
		factory.Shutdown()
	})
}

// WaitFor polls cond until it holds, failing t after 10 s or once ctx ends.
func WaitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
