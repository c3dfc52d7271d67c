package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	arinformers "k8s.io/client-go/informers/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// ObjectState is what Checker found of one of the fence's objects.
type ObjectState string

const (
	// StateUnknown: not read yet (the watch has not listed it, or the coordinator's own
	// user name is not known yet), or not readable (RBAC).
	StateUnknown ObjectState = "unknown"
	// StateOK: the object exists and its spec is what Install (and the chart) create.
	StateOK ObjectState = "ok"
	// StateMissing: the object does not exist.
	StateMissing ObjectState = "missing"
	// StateModified: the object exists with another spec.
	StateModified ObjectState = "modified"
)

var objectStates = []ObjectState{StateUnknown, StateOK, StateMissing, StateModified}

const (
	// EventReasonNotEnforced is the reason of the Warning Event Checker records when a
	// policy or binding of the fence is missing or changed.
	EventReasonNotEnforced = "FenceNotEnforced"
	// EventReasonRestored is the reason of the Normal Event Checker records when every
	// policy and binding is back as built.
	EventReasonRestored = "FenceRestored"
)

// CheckerOptions configure a Checker.
type CheckerOptions struct {
	// Params name the fence's objects. An empty CoordinatorUser is asked of the API
	// server (a SelfSubjectReview of Client's own identity) before the first check.
	Params PolicyParams
	// Client reads the policies and bindings (get, list and watch of those names).
	Client kubernetes.Interface
	// Registerer takes kshard_fence_enforced and kshard_fence_check (nil: none).
	Registerer prometheus.Registerer
	// Recorder records the FenceNotEnforced and FenceRestored Events (nil: none) on the
	// object EventObject returns (the coordinator's election Lease).
	Recorder    record.EventRecorder
	EventObject func(context.Context) (runtime.Object, error)
	// Resync re-examines the objects this often even without a watch event (default 1
	// minute), and retries an Event that found no object to go on.
	Resync time.Duration
}

// ObjectStatus is one object's check.
type ObjectStatus struct {
	// Kind and Name of the object (ValidatingAdmissionPolicy or
	// ValidatingAdmissionPolicyBinding).
	Kind, Name string
	State      ObjectState
	// Detail says what differs, for StateModified (the first spec field that does).
	Detail string
}

// String is "Kind/name state[ (detail)]".
func (s ObjectStatus) String() string {
	out := s.Kind + "/" + s.Name + " " + string(s.State)
	if s.Detail != "" {
		out += " (" + s.Detail + ")"
	}
	return out
}

// Checker detects what the fence cannot prevent: a ValidatingAdmissionPolicy cannot guard
// the admission configuration itself (the API server never sends requests on policies,
// bindings or webhook configurations to a policy), and anyone with delete on
// ValidatingAdmissionPolicyBindings, a shard's namespace controller rights included,
// can switch the fence off without any error anywhere. Every coordinator replica runs one:
// it watches the fence's policies and bindings (one watch per object, by name, so its
// RBAC names them), compares each spec with what Policies and Bindings build, and
// exports kshard_fence_enforced (1 when all are as built) and
// kshard_fence_check{object,state}; on every change it logs, and records a Warning
// Event FenceNotEnforced (or Normal FenceRestored when all are back) on the election
// Lease, which `kubectl describe lease` shows.
//
// It does not put anything back: the coordinator may not write admission configuration,
// and an operator who removed the fence on purpose would fight it.
type Checker struct {
	opts CheckerOptions
	log  logr.Logger

	enforced prometheus.Gauge
	check    *prometheus.GaugeVec

	mu      sync.Mutex
	status  []ObjectStatus
	summary string // of the last evaluation ("" before the first)
	pending *pendingEvent

	kick chan struct{}
}

type pendingEvent struct{ eventType, reason, message string }

// NewChecker returns a Checker and registers its metrics.
func NewChecker(opts CheckerOptions, log logr.Logger) (*Checker, error) {
	if err := opts.Params.Validate(); err != nil {
		return nil, err
	}
	if opts.Client == nil {
		return nil, errors.New("fence checker: CheckerOptions.Client is required")
	}
	if opts.Resync <= 0 {
		opts.Resync = time.Minute
	}
	opts.Params = opts.Params.withDefaults()
	c := &Checker{
		opts: opts, log: log.WithValues("controller", "fence-checker"),
		enforced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_fence_enforced",
			Help: "1 while every ValidatingAdmissionPolicy and binding of the server-side fence exists as the coordinator would install it; 0 while one is missing, modified or not read yet (kshard_fence_check says which)."}),
		check: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_fence_check",
			Help: "1 for the state (ok, missing, modified, unknown) each policy and binding of the server-side fence is in, 0 for the others."}, []string{"object", "state"}),
		kick: make(chan struct{}, 1),
	}
	for _, o := range c.wanted() {
		c.status = append(c.status, ObjectStatus{Kind: o.kind, Name: o.name, State: StateUnknown})
	}
	c.export()
	if opts.Registerer != nil {
		if err := promutil.Register(opts.Registerer, c.enforced, c.check); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// wantedObject is one object the fence consists of: its kind and name, and how to judge
// the stored copy (whose spec the API server defaulted) against the built one.
type wantedObject struct {
	kind, name string
	// role says what is lost while the object is not as built.
	role string
	// diff returns "" when stored equals the built object, or the first field that differs.
	diff func(stored runtime.Object) string
}

// wanted lists the fence's objects in Policies/Bindings order, each policy followed by
// its binding.
func (c *Checker) wanted() []wantedObject {
	p := c.opts.Params
	roles := []string{
		"the API server does not refuse a stale or foreign shard's writes, and partition moves (handoffs, and seizures after --seize-after) wait: each needs the enforcement probe to see this policy refuse",
		"anyone allowed to update Namespaces (shards through namespaces/status and namespaces/finalize included) may move a namespace into another partition, anyone allowed to write RBAC in the coordinator's namespace may grant, forge or delete owner Roles, and the coordinator is not limited to the record",
		"shards may delete cluster-scoped objects, and the probe identity is not limited to dry runs",
	}
	policies, bindings := Policies(p), Bindings(p)
	var out []wantedObject
	for i := range policies {
		want, wantB := policies[i], bindings[i]
		out = append(out, wantedObject{kind: "ValidatingAdmissionPolicy", name: want.Name, role: roles[i], diff: func(o runtime.Object) string {
			got, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
			if !ok {
				return fmt.Sprintf("unexpected %T", o)
			}
			return PolicySpecDiff(got.Spec, want.Spec)
		}})
		out = append(out, wantedObject{kind: "ValidatingAdmissionPolicyBinding", name: wantB.Name, role: roles[i], diff: func(o runtime.Object) string {
			got, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
			if !ok {
				return fmt.Sprintf("unexpected %T", o)
			}
			return BindingSpecDiff(got.Spec, wantB.Spec)
		}})
	}
	return out
}

// Run checks until ctx ends. It first learns the coordinator's user name when
// Params.CoordinatorUser is empty (retrying until the API server answers), then watches.
func (c *Checker) Run(ctx context.Context) error {
	if c.opts.Params.CoordinatorUser == "" {
		err := wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			r, err := c.opts.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err == nil && r.Status.UserInfo.Username == "" {
				err = errors.New("the SelfSubjectReview names no user")
			}
			if err != nil {
				c.log.Error(err, "cannot learn the coordinator's own user name (SelfSubjectReview), which the fence's record guard names; retrying")
				return false, nil
			}
			c.opts.Params.CoordinatorUser = r.Status.UserInfo.Username
			return true, nil
		})
		if err != nil {
			return nil // ctx ended
		}
		c.log.Info("fence checker: the coordinator authenticates as", "user", c.opts.Params.CoordinatorUser)
	}
	wanted := c.wanted()
	stores := make([]cache.Store, len(wanted))
	synced := make([]cache.InformerSynced, len(wanted))
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.trigger() },
		UpdateFunc: func(any, any) { c.trigger() },
		DeleteFunc: func(any) { c.trigger() },
	}
	for i, w := range wanted {
		byName := func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.name).String()
		}
		var inf cache.SharedIndexInformer
		if w.kind == "ValidatingAdmissionPolicy" {
			inf = arinformers.NewFilteredValidatingAdmissionPolicyInformer(c.opts.Client, 0, cache.Indexers{}, byName)
		} else {
			inf = arinformers.NewFilteredValidatingAdmissionPolicyBindingInformer(c.opts.Client, 0, cache.Indexers{}, byName)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		stores[i], synced[i] = inf.GetStore(), inf.HasSynced
		go inf.RunWithContext(ctx)
	}

	// Until every watch has listed, the objects' states stay unknown (and
	// kshard_fence_enforced 0); a watch that cannot list (RBAC) is worth a warning.
	warn := time.AfterFunc(30*time.Second, func() {
		c.log.Info("WARNING: cannot read the server-side fence's ValidatingAdmissionPolicies and bindings after 30s (RBAC: get, list and watch of them by name?); kshard_fence_enforced stays 0",
			"objects", names(wanted))
	})
	ok := cache.WaitForCacheSync(ctx.Done(), synced...)
	warn.Stop()
	if !ok {
		return nil // ctx ended
	}
	ticker := time.NewTicker(c.opts.Resync)
	defer ticker.Stop()
	for {
		c.evaluate(ctx, wanted, stores)
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-ticker.C:
		}
	}
}

func names(ws []wantedObject) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.kind + "/" + w.name
	}
	return out
}

func (c *Checker) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// evaluate compares the stored objects with the built ones, exports the result, and logs
// and records an Event when it changed.
func (c *Checker) evaluate(ctx context.Context, wanted []wantedObject, stores []cache.Store) {
	status := make([]ObjectStatus, len(wanted))
	var problems []string
	affected := map[string]bool{}
	var roles []string
	for i, w := range wanted {
		status[i] = ObjectStatus{Kind: w.kind, Name: w.name}
		obj, exists, err := stores[i].GetByKey(w.name)
		switch {
		case err != nil:
			status[i].State, status[i].Detail = StateUnknown, err.Error()
		case !exists:
			status[i].State = StateMissing
		default:
			if d := w.diff(obj.(runtime.Object)); d != "" {
				status[i].State, status[i].Detail = StateModified, d
			} else {
				status[i].State = StateOK
			}
		}
		if status[i].State != StateOK {
			problems = append(problems, status[i].String())
			if !affected[w.role] {
				affected[w.role] = true
				roles = append(roles, w.role)
			}
		}
	}
	summary := "enforced"
	if len(problems) > 0 {
		summary = strings.Join(problems, ", ")
	}

	c.mu.Lock()
	previous := c.summary
	c.status, c.summary = status, summary
	c.mu.Unlock()
	c.export()

	if summary != previous {
		switch {
		case len(problems) > 0:
			msg := "the server-side fence is not enforced: " + summary + ". Consequences: " + strings.Join(roles, "; ") +
				". Reinstall the chart's shard fence (or ownerrecord.Install) to restore it."
			c.log.Info("WARNING: "+msg, "problems", problems)
			c.setPending(&pendingEvent{corev1.EventTypeWarning, EventReasonNotEnforced, msg})
		case previous == "":
			c.log.Info("the server-side fence is enforced: every policy and binding is as built", "objects", names(wanted))
		default:
			msg := "the server-side fence is enforced again: every policy and binding is as built (" + strings.Join(names(wanted), ", ") + ")"
			c.log.Info(msg)
			c.setPending(&pendingEvent{corev1.EventTypeNormal, EventReasonRestored, msg})
		}
	}
	c.flushEvent(ctx)
}

func (c *Checker) setPending(e *pendingEvent) {
	c.mu.Lock()
	c.pending = e
	c.mu.Unlock()
}

// flushEvent records the pending Event, if any, on the event object; when that cannot be
// read it stays pending for the next evaluation.
func (c *Checker) flushEvent(ctx context.Context) {
	c.mu.Lock()
	e := c.pending
	c.mu.Unlock()
	if e == nil || c.opts.Recorder == nil || c.opts.EventObject == nil {
		return
	}
	obj, err := c.opts.EventObject(ctx)
	if err != nil {
		c.log.Error(err, "cannot read the object the fence Event goes on; retrying at the next check", "reason", e.reason)
		return
	}
	c.opts.Recorder.Event(obj, e.eventType, e.reason, e.message)
	c.mu.Lock()
	if c.pending == e {
		c.pending = nil
	}
	c.mu.Unlock()
}

// export sets the gauges from the current status.
func (c *Checker) export() {
	c.mu.Lock()
	defer c.mu.Unlock()
	enforced := 1.0
	for _, s := range c.status {
		object := s.Kind + "/" + s.Name
		for _, st := range objectStates {
			v := 0.0
			if st == s.State {
				v = 1
			}
			c.check.WithLabelValues(object, string(st)).Set(v)
		}
		if s.State != StateOK {
			enforced = 0
		}
	}
	c.enforced.Set(enforced)
}

// Enforced reports whether the last check found every policy and binding as built.
func (c *Checker) Enforced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.summary == "enforced"
}

// Status returns the last check of every object, in Policies/Bindings order.
func (c *Checker) Status() []ObjectStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.status)
}

// PolicySpecDiff returns "" when the stored spec got (which the API server defaulted, and
// whose CEL a chart may have folded over lines) is the built spec want, or else the name
// of the first field that differs.
func PolicySpecDiff(got, want admissionregistrationv1.ValidatingAdmissionPolicySpec) string {
	got, want = normalizePolicySpec(got), normalizePolicySpec(want)
	for _, f := range []struct {
		name    string
		got, wt any
	}{
		{"spec.paramKind", got.ParamKind, want.ParamKind},
		{"spec.failurePolicy", got.FailurePolicy, want.FailurePolicy},
		{"spec.matchConstraints", got.MatchConstraints, want.MatchConstraints},
		{"spec.matchConditions", got.MatchConditions, want.MatchConditions},
		{"spec.variables", got.Variables, want.Variables},
		{"spec.validations", got.Validations, want.Validations},
		{"spec.auditAnnotations", got.AuditAnnotations, want.AuditAnnotations},
	} {
		if !apiequality.Semantic.DeepEqual(f.got, f.wt) {
			return f.name
		}
	}
	return ""
}

// BindingSpecDiff is PolicySpecDiff for a binding.
func BindingSpecDiff(got, want admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) string {
	got, want = *got.DeepCopy(), *want.DeepCopy()
	defaultMatchResources(got.MatchResources)
	defaultMatchResources(want.MatchResources)
	for _, f := range []struct {
		name    string
		got, wt any
	}{
		{"spec.policyName", got.PolicyName, want.PolicyName},
		{"spec.paramRef", got.ParamRef, want.ParamRef},
		{"spec.matchResources", got.MatchResources, want.MatchResources},
		{"spec.validationActions", got.ValidationActions, want.ValidationActions},
	} {
		if !apiequality.Semantic.DeepEqual(f.got, f.wt) {
			return f.name
		}
	}
	return ""
}

// normalizePolicySpec applies the API server's defaults for what the fence leaves unset
// and collapses the whitespace of every CEL expression.
func normalizePolicySpec(s admissionregistrationv1.ValidatingAdmissionPolicySpec) admissionregistrationv1.ValidatingAdmissionPolicySpec {
	s = *s.DeepCopy()
	if s.FailurePolicy == nil {
		fail := admissionregistrationv1.Fail
		s.FailurePolicy = &fail
	}
	defaultMatchResources(s.MatchConstraints)
	for i := range s.MatchConditions {
		s.MatchConditions[i].Expression = collapseSpace(s.MatchConditions[i].Expression)
	}
	for i := range s.Variables {
		s.Variables[i].Expression = collapseSpace(s.Variables[i].Expression)
	}
	for i := range s.Validations {
		s.Validations[i].Expression = collapseSpace(s.Validations[i].Expression)
		s.Validations[i].MessageExpression = collapseSpace(s.Validations[i].MessageExpression)
	}
	for i := range s.AuditAnnotations {
		s.AuditAnnotations[i].ValueExpression = collapseSpace(s.AuditAnnotations[i].ValueExpression)
	}
	return s
}

// defaultMatchResources applies the API server's defaults to m (nil stays nil).
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	if m.MatchPolicy == nil {
		equivalent := admissionregistrationv1.Equivalent
		m.MatchPolicy = &equivalent
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				all := admissionregistrationv1.AllScopes
				rules[i].Scope = &all
			}
		}
	}
}

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }
