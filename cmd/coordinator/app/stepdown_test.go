package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/sharding/leader"
)

// TestConfirmStepDown: a shard's claim of a newer term ends the leadership only when the
// Lease or the term record shows a newer leader.
func TestConfirmStepDown(t *testing.T) {
	const (
		me    = "coordinator-a@10.0.0.1:9090#00000001"
		claim = `shard "mallory" reported an epoch of a newer leader term`
	)
	o := &leader.Options{Enabled: true, ResourceName: "kshard-coordinator", ResourceNamespace: "kube-system"}
	election := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: o.ResourceNamespace, Name: o.ResourceName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	termRecord := func(v string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: o.ResourceNamespace, Name: leader.TermLeaseName(o.ResourceName),
			Annotations: map[string]string{leader.TermAnnotation: v}}}
	}
	tests := []struct {
		name      string
		objects   []runtime.Object
		term      uint64
		wantStep  bool
		wantCause string
	}{
		{name: "claim only: keep leading", objects: []runtime.Object{election(me), termRecord("4")}, term: 4},
		{name: "another holder: step down", objects: []runtime.Object{election("coordinator-b@10.0.0.2:9090#00000002"), termRecord("5")}, term: 4,
			wantStep: true, wantCause: "coordinator-b"},
		{name: "a newer term recorded: step down", objects: []runtime.Object{election(me), termRecord("5")}, term: 4,
			wantStep: true, wantCause: "term 5 is recorded"},
		{name: "not leading any more: nothing to do", objects: []runtime.Object{election("other")}, term: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := leader.NewVerifier(o, fake.NewClientset(tt.objects...), me)
			ctx, stepDown := context.WithCancelCause(context.Background())
			defer stepDown(nil)
			got := confirmStepDown(ctx, logr.Discard(), v, tt.term, time.Second, claim, stepDown)
			if got != tt.wantStep || (ctx.Err() != nil) != tt.wantStep {
				t.Fatalf("stepped down: returned %v, context ended %v; want %v", got, ctx.Err() != nil, tt.wantStep)
			}
			if tt.wantStep {
				cause := context.Cause(ctx).Error()
				if !strings.Contains(cause, tt.wantCause) || !strings.Contains(cause, "mallory") {
					t.Errorf("cause %q; want the claim and evidence containing %q", cause, tt.wantCause)
				}
			}
		})
	}
}
