package differential

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kptr "k8s.io/utils/ptr"
)

// The ResourceQuota scenario, in three namespaces: compute (requests and limits of cpu and
// memory, an extended resource, pods), objects (count/configmaps and configmaps, secrets,
// count/deployments.apps, services with node ports and load balancers, PVCs of two
// storage classes with per-class counts and storage) and scopes (BestEffort,
// NotBestEffort, Terminating, NotTerminating, a scopeSelector on a PriorityClass).
// Steps: create the quotas; create objects; delete some and fail a running pod (kwok);
// change spec.hard; attempt over-limit creates. Compared: every quota's status.hard and status.used, and the outcome
// of each attempted create (created, or the API server's refusal, normalised), which
// quota admission decides from status.used.

const (
	quotaHigh   = "kshard-e2e-quota-high"
	quotaGadget = "example.com/gadget"
	quotaFast   = "fast.storageclass.storage.k8s.io/"
	quotaSlow   = "slow.storageclass.storage.k8s.io/"
)

var quotaNamespaces = []string{"compute", "objects", "scopes"}

// quotaAttempts keeps, per side, the outcome of the over-limit creates.
var quotaAttempts sync.Map // *side → map[string]string

func TestDifferentialResourceQuota(t *testing.T) {
	scenario{
		controllers: []string{"resourcequota", "pvc-protection"},
		namespaces:  quotaNamespaces,
		steps:       quotaSteps(),
		snapshot:    quotaSnapshot,
	}.run(t)
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func quotaHards() map[string]map[string]corev1.ResourceList {
	return map[string]map[string]corev1.ResourceList{
		"compute": {"compute": rl("requests.cpu", "1", "requests.memory", "1Gi", "limits.cpu", "2", "limits.memory", "2Gi",
			"requests."+quotaGadget, "2", "pods", "4")},
		"objects": {"objects": rl("count/configmaps", "4", "configmaps", "4", "secrets", "3", "count/deployments.apps", "2",
			"services", "4", "services.nodeports", "2", "services.loadbalancers", "1",
			"persistentvolumeclaims", "4", "requests.storage", "10Gi",
			quotaFast+"requests.storage", "3Gi", quotaFast+"persistentvolumeclaims", "2", quotaSlow+"persistentvolumeclaims", "2")},
		"scopes": {
			"besteffort":     rl("pods", "3"),
			"notbesteffort":  rl("pods", "4", "requests.cpu", "1", "requests.memory", "1Gi"),
			"terminating":    rl("pods", "2"),
			"notterminating": rl("pods", "5"),
			"high":           rl("pods", "1"),
		},
	}
}

func quotaObject(ns, name string, hard corev1.ResourceList) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if ns != "scopes" {
		return q
	}
	switch name {
	case "besteffort":
		q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}
	case "notbesteffort":
		q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort}
	case "terminating":
		q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}
	case "notterminating":
		q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating}
	case "high":
		q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{quotaHigh}}}}
	}
	return q
}

// quotaPod is a pod with, per container, requests and limits (cpu, memory, extended
// resource; "" for none), a priority class and an active deadline (Terminating).
func quotaPod(name, reqCPU, limCPU, reqMem, limMem, gadget string, terminating bool, priorityClass string) *corev1.Pod {
	req, lim := corev1.ResourceList{}, corev1.ResourceList{}
	set := func(l corev1.ResourceList, k corev1.ResourceName, v string) {
		if v != "" {
			l[k] = resource.MustParse(v)
		}
	}
	set(req, corev1.ResourceCPU, reqCPU)
	set(lim, corev1.ResourceCPU, limCPU)
	set(req, corev1.ResourceMemory, reqMem)
	set(lim, corev1.ResourceMemory, limMem)
	set(req, quotaGadget, gadget)
	set(lim, quotaGadget, gadget)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: new(int64),
		PriorityClassName:             priorityClass,
		Containers: []corev1.Container{{Name: "main", Image: imageV1,
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}}}
	if terminating {
		p.Spec.ActiveDeadlineSeconds = kptr.To[int64](3600)
	}
	return p
}

func pvc(name, class, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: kptr.To(class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: rl("storage", size)}}}
}

func service(name string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Type: typ,
		Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
}

func (s *side) quotaCreate(ctx context.Context) error {
	cs := s.f.Client
	for _, p := range []*corev1.Pod{
		quotaPod("p1", "250m", "500m", "256Mi", "512Mi", "1", false, ""),
		quotaPod("p2", "250m", "500m", "256Mi", "512Mi", "1", false, ""),
		quotaPod("p3", "250m", "500m", "256Mi", "512Mi", "", false, ""),
	} {
		if _, err := cs.CoreV1().Pods(s.ns["compute"]).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	ns := s.ns["objects"]
	for _, n := range []string{"a", "b"} {
		if _, err := s.createCM(ctx, "objects", n, nil, nil); err != nil {
			return err
		}
	}
	for _, n := range []string{"s1", "s2"} {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, n := range []string{"d1", "d2"} {
		d := gcDeployment(n)
		d.Spec.Replicas = kptr.To[int32](0)
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, sv := range []*corev1.Service{service("c1", corev1.ServiceTypeClusterIP), service("np1", corev1.ServiceTypeNodePort),
		service("lb1", corev1.ServiceTypeLoadBalancer)} {
		if _, err := cs.CoreV1().Services(ns).Create(ctx, sv, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("service %s: %w", sv.Name, err)
		}
	}
	for _, c := range []*corev1.PersistentVolumeClaim{pvc("f1", "fast", "1Gi"), pvc("f2", "fast", "1Gi"), pvc("s1", "slow", "2Gi")} {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pvc %s: %w", c.Name, err)
		}
	}
	for _, p := range []*corev1.Pod{
		quotaPod("be-1", "", "", "", "", "", false, ""),
		quotaPod("be-2", "", "", "", "", "", true, ""),
		quotaPod("burst-1", "100m", "", "64Mi", "", "", false, ""),
		quotaPod("burst-2", "100m", "", "64Mi", "", "", true, ""),
		quotaPod("high-1", "", "", "", "", "", false, quotaHigh),
	} {
		if _, err := cs.CoreV1().Pods(s.ns["scopes"]).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// quotaCacheWarm makes sure the side's quota controller has seen the objects namespace's
// kube-root-ca.crt before the quotas are made. That ConfigMap is published just before
// the scenario starts (on kshard's side once a shard holds the namespace), and a quota's
// first count, read from the controller's informer, misses it when the informer lags the
// API server; nothing counts it later (neither controller replenishes on an add:
// admission charges creates), so the count would be one short on one side by chance. A
// probe quota on count/configmaps is nudged (its spec.hard changed, which recounts) until
// it counts what the API server lists, then deleted.
func (s *side) quotaCacheWarm(ctx context.Context) error {
	qs := s.f.Client.CoreV1().ResourceQuotas(s.ns["objects"])
	if _, err := qs.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.ResourceQuotaSpec{Hard: rl("count/configmaps", "100")}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	hard := int64(100)
	if err := pollCtx(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		cms, err := s.f.Client.CoreV1().ConfigMaps(s.ns["objects"]).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		q, err := qs.Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !equality.Semantic.DeepEqual(q.Spec.Hard, q.Status.Hard) {
			return false, nil // a count is under way
		}
		used := q.Status.Used["count/configmaps"]
		if used.Value() == int64(len(cms.Items)) {
			return true, nil
		}
		hard++
		q.Spec.Hard = rl("count/configmaps", fmt.Sprint(hard))
		_, err = qs.Update(ctx, q, metav1.UpdateOptions{})
		return false, err
	}); err != nil {
		return fmt.Errorf("probe quota: %w", err)
	}
	return qs.Delete(ctx, "probe", metav1.DeleteOptions{})
}

func quotaSteps() []step {
	return []step{
		{name: "create the quotas", do: func(ctx context.Context, s *side) error {
			pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: quotaHigh}, Value: 1000}
			if _, err := s.f.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			for _, logical := range quotaNamespaces {
				// What every namespace gets (default ServiceAccount, kube-root-ca.crt) is
				// there before the quotas: pods need the one, configmaps count the other.
				if err := pollCtx(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
					if _, err := s.f.Client.CoreV1().ServiceAccounts(s.ns[logical]).Get(ctx, "default", metav1.GetOptions{}); err != nil {
						return false, err
					}
					_, err := s.f.Client.CoreV1().ConfigMaps(s.ns[logical]).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
					return err == nil, err
				}); err != nil {
					return err
				}
				if logical == "objects" {
					if err := s.quotaCacheWarm(ctx); err != nil {
						return err
					}
				}
				for name, hard := range quotaHards()[logical] {
					if _, err := s.f.Client.CoreV1().ResourceQuotas(s.ns[logical]).Create(ctx, quotaObject(logical, name, hard), metav1.CreateOptions{}); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{name: "create pods, ConfigMaps, Secrets, Deployments, Services, PVCs", do: func(ctx context.Context, s *side) error {
			return s.quotaCreate(ctx)
		}},
		{name: "delete some, fail a running pod", do: func(ctx context.Context, s *side) error {
			cs, ns := s.f.Client, s.ns["objects"]
			del := metav1.DeleteOptions{}
			for _, err := range []error{
				cs.CoreV1().Pods(s.ns["compute"]).Delete(ctx, "p2", del),
				cs.CoreV1().Pods(s.ns["scopes"]).Delete(ctx, "be-2", del),
				cs.CoreV1().ConfigMaps(ns).Delete(ctx, "b", del),
				cs.CoreV1().Secrets(ns).Delete(ctx, "s2", del),
				cs.AppsV1().Deployments(ns).Delete(ctx, "d2", del),
				cs.CoreV1().Services(ns).Delete(ctx, "np1", del),
				cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "f2", del),
				// kwok fails it: a terminal pod is no longer counted.
				mergePatch(ctx, cs.CoreV1().Pods(s.ns["scopes"]), "burst-1", `{"metadata":{"labels":{"`+kwokLabel+`":"fail"}}}`),
			} {
				if err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "change spec.hard", do: func(ctx context.Context, s *side) error {
			changes := map[string]map[string]corev1.ResourceList{
				"compute": {"compute": rl("requests.cpu", "750m", "requests.memory", "1Gi", "limits.cpu", "2", "limits.memory", "1Gi",
					"requests."+quotaGadget, "2", "pods", "3")},
				"objects": {"objects": rl("count/configmaps", "2", "configmaps", "2", "secrets", "1", "count/secrets", "2",
					"count/deployments.apps", "1", "services", "3", "services.nodeports", "1", "services.loadbalancers", "1",
					"persistentvolumeclaims", "4",
					quotaFast+"requests.storage", "1Gi", quotaFast+"persistentvolumeclaims", "1", quotaSlow+"persistentvolumeclaims", "2")},
				"scopes": {"besteffort": rl("pods", "2"), "high": rl("pods", "2")},
			}
			for logical, qs := range changes {
				for name, hard := range qs {
					q, err := s.f.Client.CoreV1().ResourceQuotas(s.ns[logical]).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					q.Spec.Hard = hard
					if _, err := s.f.Client.CoreV1().ResourceQuotas(s.ns[logical]).Update(ctx, q, metav1.UpdateOptions{}); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{name: "attempt over-limit creates", do: func(ctx context.Context, s *side) error {
			cs, ns := s.f.Client, s.ns["objects"]
			outcome := func(err error) string {
				if err == nil {
					return "created"
				}
				return "refused: " + newNormaliser(s, nil, nil).text(err.Error())
			}
			attempts := map[string]string{}
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
			attempts["objects ConfigMap c"] = outcome(err)
			_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc("f3", "fast", "1Gi"), metav1.CreateOptions{})
			attempts["objects PVC f3"] = outcome(err)
			_, err = cs.CoreV1().Services(ns).Create(ctx, service("lb2", corev1.ServiceTypeLoadBalancer), metav1.CreateOptions{})
			attempts["objects Service lb2"] = outcome(err)
			_, err = cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d3"},
				Spec: gcDeployment("d3").Spec}, metav1.CreateOptions{})
			attempts["objects Deployment d3"] = outcome(err)
			_, err = cs.CoreV1().Pods(s.ns["compute"]).Create(ctx, quotaPod("p4", "250m", "500m", "256Mi", "512Mi", "", false, ""), metav1.CreateOptions{})
			attempts["compute Pod p4"] = outcome(err)
			_, err = cs.CoreV1().Pods(s.ns["scopes"]).Create(ctx, quotaPod("be-3", "", "", "", "", "", false, ""), metav1.CreateOptions{})
			attempts["scopes Pod be-3"] = outcome(err)
			_, err = cs.CoreV1().Pods(s.ns["scopes"]).Create(ctx, quotaPod("high-2", "100m", "", "64Mi", "", "", false, quotaHigh), metav1.CreateOptions{})
			attempts["scopes Pod high-2"] = outcome(err)
			quotaAttempts.Store(s, attempts)
			return nil
		}},
	}
}

// quotaSnapshot reads every quota's status.hard and status.used, the phases of the scopes
// namespace's pods and the attempted creates' outcomes. A step is done when every quota's
// status.hard is its spec.hard and those pods are running or finished.
func quotaSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	for _, logical := range quotaNamespaces {
		qs, err := s.f.Client.CoreV1().ResourceQuotas(s.ns[logical]).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		for _, q := range qs.Items {
			p := "quota " + logical + "/" + q.Name
			if !equality.Semantic.DeepEqual(q.Spec.Hard, q.Status.Hard) {
				pending = append(pending, p+": status.hard is not spec.hard")
			}
			for r, v := range q.Status.Hard {
				out[p+" hard "+string(r)] = v.String()
			}
			for r, v := range q.Status.Used {
				out[p+" used "+string(r)] = v.String()
			}
		}
	}
	pods, err := s.f.Client.CoreV1().Pods(s.ns["scopes"]).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	for _, p := range pods.Items {
		out["pod scopes/"+p.Name+" phase"] = string(p.Status.Phase)
		if p.Status.Phase == corev1.PodPending {
			pending = append(pending, "pod scopes/"+p.Name+" pending")
		}
	}
	if a, ok := quotaAttempts.Load(s); ok {
		for k, v := range a.(map[string]string) {
			out["attempt "+k] = v
		}
	}
	return view{values: out, pending: pending}, nil
}
