package ownerrecord

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

var checkParams = PolicyParams{Name: "kshard-fence", Namespace: "kshard-system", ServiceAccount: "kshard-shard", ClusterPartition: "2457",
	CoordinatorUser: ServiceAccountUser("kshard-system", "kshard-coordinator")}

// asStored returns the fence's objects as the API server stores them: defaults applied,
// and the CEL of the policies folded over lines as the chart renders it.
func asStored() []runtime.Object {
	var out []runtime.Object
	for _, p := range Policies(checkParams) {
		p = p.DeepCopy()
		defaultMatchResources(p.Spec.MatchConstraints)
		for i := range p.Spec.Validations {
			p.Spec.Validations[i].MessageExpression = strings.ReplaceAll(p.Spec.Validations[i].MessageExpression, " + ", "\n+ ")
		}
		out = append(out, p)
	}
	for _, b := range Bindings(checkParams) {
		out = append(out, b.DeepCopy())
	}
	return out
}

func TestPolicySpecDiff(t *testing.T) {
	policy := Policy(checkParams)
	tests := []struct {
		name string
		edit func(*admissionregistrationv1.ValidatingAdmissionPolicy)
		want string
	}{
		{name: "as built", edit: func(*admissionregistrationv1.ValidatingAdmissionPolicy) {}},
		{name: "defaults applied by the API server", edit: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			defaultMatchResources(p.Spec.MatchConstraints)
		}},
		{name: "CEL folded over lines", edit: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Variables[0].Expression = strings.ReplaceAll(p.Spec.Variables[0].Expression, " && ", "\n  && ")
		}},
		{name: "failure policy Ignore", want: "spec.failurePolicy", edit: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			ignore := admissionregistrationv1.Ignore
			p.Spec.FailurePolicy = &ignore
		}},
		{name: "match condition loosened", want: "spec.matchConditions", edit: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions[0].Expression = "false"
		}},
		{name: "namespace selector added", want: "spec.matchConstraints", edit: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
		}},
		{name: "validation always true", want: "spec.validations", edit: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "true"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := policy.DeepCopy()
			tt.edit(got)
			if d := PolicySpecDiff(got.Spec, policy.Spec); d != tt.want {
				t.Errorf("PolicySpecDiff = %q, want %q", d, tt.want)
			}
		})
	}
}

func TestBindingSpecDiff(t *testing.T) {
	binding := Binding(checkParams)
	tests := []struct {
		name string
		edit func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		want string
	}{
		{name: "as built", edit: func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {}},
		{name: "audit only", want: "spec.validationActions", edit: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
		}},
		{name: "narrowed by a namespace selector", want: "spec.matchResources", edit: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"none": "x"}}}
		}},
		{name: "other policy", want: "spec.policyName", edit: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.PolicyName = "other"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := binding.DeepCopy()
			tt.edit(got)
			if d := BindingSpecDiff(got.Spec, binding.Spec); d != tt.want {
				t.Errorf("BindingSpecDiff = %q, want %q", d, tt.want)
			}
		})
	}
}

// TestChecker runs a Checker against a fake API server: the fence as stored (defaulted,
// folded) is enforced; deleting a binding, or setting a binding to Audit, flips
// kshard_fence_enforced to 0 with a Warning Event naming the object; putting it back
// flips it to 1 with a Normal Event.
func TestChecker(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kshard-coordinator", Namespace: "kshard-system", UID: "lease-uid"}}
	tests := []struct {
		name string
		// breaks the fence (with the fake client) and returns how to mend it.
		breaks     func(context.Context, *fake.Clientset) (object, state string, mend func() error)
		wantReason string
	}{
		{name: "fence binding deleted", breaks: func(ctx context.Context, c *fake.Clientset) (string, string, func() error) {
			b := Binding(checkParams)
			must(t, c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}))
			return "ValidatingAdmissionPolicyBinding/" + b.Name, "missing", func() error {
				_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
				return err
			}
		}},
		{name: "record guard binding set to Audit", breaks: func(ctx context.Context, c *fake.Clientset) (string, string, func() error) {
			b := Bindings(checkParams)[1]
			audit := b.DeepCopy()
			audit.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
			_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(ctx, audit, metav1.UpdateOptions{})
			must(t, err)
			return "ValidatingAdmissionPolicyBinding/" + b.Name, "modified", func() error {
				_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(ctx, b, metav1.UpdateOptions{})
				return err
			}
		}},
		{name: "limits policy deleted", breaks: func(ctx context.Context, c *fake.Clientset) (string, string, func() error) {
			p := Policies(checkParams)[2]
			must(t, c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, p.Name, metav1.DeleteOptions{}))
			return "ValidatingAdmissionPolicy/" + p.Name, "missing", func() error {
				_, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{})
				return err
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset(append(asStored(), lease)...)
			reg := prometheus.NewRegistry()
			recorder := record.NewFakeRecorder(10)
			c, err := NewChecker(CheckerOptions{Params: checkParams, Client: client, Registerer: reg, Recorder: recorder,
				EventObject: func(ctx context.Context) (runtime.Object, error) {
					return client.CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
				}, Resync: time.Hour}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(c.enforced); got != 0 {
				t.Errorf("kshard_fence_enforced before the first check = %v, want 0", got)
			}
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() { cancel(); <-done }()

			waitEnforced(t, c, true)
			if got := testutil.ToFloat64(c.enforced); got != 1 {
				t.Errorf("kshard_fence_enforced = %v, want 1", got)
			}
			if len(recorder.Events) != 0 {
				t.Errorf("an Event for a fence enforced from the start: %s", <-recorder.Events)
			}

			object, state, mend := tt.breaks(ctx, client)
			waitEnforced(t, c, false)
			if got := testutil.ToFloat64(c.enforced); got != 0 {
				t.Errorf("kshard_fence_enforced = %v, want 0", got)
			}
			if got := testutil.ToFloat64(c.check.WithLabelValues(object, state)); got != 1 {
				t.Errorf("kshard_fence_check{object=%q,state=%q} = %v, want 1", object, state, got)
			}
			if got := testutil.ToFloat64(c.check.WithLabelValues(object, "ok")); got != 0 {
				t.Errorf("kshard_fence_check{object=%q,state=ok} = %v, want 0", object, got)
			}
			ev := <-recorder.Events
			if !strings.HasPrefix(ev, "Warning "+EventReasonNotEnforced) || !strings.Contains(ev, object+" "+state) {
				t.Errorf("event %q: want a Warning %s naming %s %s", ev, EventReasonNotEnforced, object, state)
			}

			must(t, mend())
			waitEnforced(t, c, true)
			ev = <-recorder.Events
			if !strings.HasPrefix(ev, "Normal "+EventReasonRestored) {
				t.Errorf("event %q: want a Normal %s", ev, EventReasonRestored)
			}
			if got := testutil.ToFloat64(c.enforced); got != 1 {
				t.Errorf("kshard_fence_enforced after the repair = %v, want 1", got)
			}
		})
	}
}

// TestCheckerLearnsItsUser checks that a Checker without CoordinatorUser asks the API
// server who it is (SelfSubjectReview), and judges the record guard with that name.
func TestCheckerLearnsItsUser(t *testing.T) {
	tests := []struct {
		name, user   string
		wantEnforced bool
	}{
		{name: "the user the record guard names", user: checkParams.CoordinatorUser, wantEnforced: true},
		{name: "another user", user: "system:serviceaccount:kshard-system:someone-else"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset(asStored()...)
			client.PrependReactor("create", "selfsubjectreviews", func(clienttesting.Action) (bool, runtime.Object, error) {
				r := &authenticationv1.SelfSubjectReview{}
				r.Status.UserInfo.Username = tt.user
				return true, r, nil
			})
			p := checkParams
			p.CoordinatorUser = ""
			c, err := NewChecker(CheckerOptions{Params: p, Client: client, Resync: time.Hour}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			waitEnforced(t, c, tt.wantEnforced)
			for _, s := range c.Status() {
				want := StateOK
				if !tt.wantEnforced && s.Kind == "ValidatingAdmissionPolicy" && s.Name == checkParams.RecordPolicyName() {
					want = StateModified
				}
				if s.State != want {
					t.Errorf("%s: want %s", s, want)
				}
			}
		})
	}
}

func waitEnforced(t *testing.T, c *Checker, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.summary != "" && (c.summary == "enforced") == want, nil
	})
	if err != nil {
		t.Fatalf("the checker never found the fence enforced=%t: %v", want, c.Status())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
